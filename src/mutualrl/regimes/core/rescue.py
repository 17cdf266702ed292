"""SGT's rescue as a part of another regime's loss (opd-sgt, byte-kd with ``rescue_lam``): where every own rollout of a
prompt failed and a peer's succeeded, the learner adds ``λ_r`` times the NLL of one verified peer success,
retokenized into its vocabulary, under a run-wide budget of steps per prompt.

The maths (:func:`every_own_failed`, :func:`rescue_gate`, :func:`choose_rescues`, :func:`rescue_weights`,
:func:`rescue_nll`) is SGT's (docs/regimes.md, "SGT"), written for one chosen success per prompt;
:class:`RescueBudget` is the adapter's side (the counters a checkpoint saves, the rescues attached to TRL's batch,
the NLL term of a micro-batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from mutualrl.regimes.core.batch_rows import attach_sequences, attached_rows
from mutualrl.regimes.core.peer_responses import learner_responses
from mutualrl.regimes.core.rank_metrics import Share
from mutualrl.regimes.core.reward_shapes import check_float, every_scored
from mutualrl.regimes.core.trainer_interface import GRPOBatch, StepRollouts, TrainerView

if TYPE_CHECKING:
    import pyarrow as pa


def every_own_failed(own_rewards: torch.Tensor, failure_threshold: float) -> torch.Tensor:
    """bool ``[P]``: every scored own rollout of the prompt below ``failure_threshold``, at least one scored
    (``own_rewards`` ``[P, K]``, NaN: unscored). The learner's blind spot on that prompt this step."""
    return every_scored(own_rewards < failure_threshold, own_rewards)  # [P]


def rescue_gate(own_rewards: torch.Tensor, peer_rewards: torch.Tensor, success_threshold: float,
                failure_threshold: float, rescued_before: torch.Tensor, max_rescues: int | None) -> torch.Tensor:
    """bool ``[P]``: the prompts rescued this step. Every scored own rollout below ``failure_threshold`` (and at
    least one scored), some peer rollout above ``success_threshold``, and ``rescued_before`` ``[P]`` (earlier steps
    that rescued the prompt) below ``max_rescues`` (None: no limit)."""
    check_float("peer_rewards", peer_rewards, 3, "[P, M-1, K]")
    failed = every_own_failed(own_rewards, failure_threshold)  # [P]
    peer_success = (peer_rewards > success_threshold).flatten(1).any(-1)  # [P]
    gated = failed & peer_success  # [P]
    if max_rescues is not None:
        gated = gated & (rescued_before < max_rescues)  # [P]
    return gated


def choose_rescues(peer_rewards: torch.Tensor, gated: torch.Tensor, success_threshold: float,
                   generator: torch.Generator) -> torch.Tensor:
    """int64 ``[P, 2]``: ``(peer slot, sample index)`` of the success each gated prompt learns from, uniform over the
    prompt's peer successes (peer-major order; one draw per prompt, gated or not, so the generator advances the same
    every step); ``(-1, -1)`` off the gate."""
    p, peers, k = peer_rewards.shape
    candidates = (peer_rewards > success_threshold).reshape(p, peers * k) & gated[:, None]  # [P, (M-1)·K]
    count = candidates.sum(-1)  # [P]
    draw = torch.rand(p, generator=generator, dtype=torch.float64)  # [P]
    rank = torch.minimum((draw * count).floor().long(), (count - 1).clamp(min=0))  # [P]
    hit = candidates & (candidates.long().cumsum(-1) == (rank + 1)[:, None])  # [P, (M-1)·K]
    position = hit.long().argmax(-1)  # [P]
    chosen = torch.stack([position // k, position % k], dim=1)  # [P, 2]
    return torch.where((count > 0)[:, None], chosen, torch.full_like(chosen, -1))


def rescue_weights(rows: torch.Tensor, lam: float, steps_per_generation: int, gradient_accumulation_steps: int,
                   num_gated: int, num_processes: int = 1) -> torch.Tensor:
    """float32 ``[B]``: the weight of each row's rescue NLL, ``w = λ_r · S · N / (G · n)`` on the ``rows`` (bool
    ``[B]``) that carry one, 0 elsewhere; ``n`` the rescued rows of every rank. TRL cuts the generation batch into
    ``S`` micro-batches and ``G`` of them make an optimizer step, and DDP averages over ``N`` ranks, so the summed
    term over one step is ``λ_r`` times the mean NLL over the rescued rows (SGT's weighting)."""
    if num_gated < int(rows.sum()):
        raise ValueError(f"num_gated ({num_gated}) is smaller than this rank's rescued rows ({int(rows.sum())})")
    if num_gated == 0:
        return torch.zeros(rows.shape, dtype=torch.float32)
    w = lam * steps_per_generation * num_processes / (gradient_accumulation_steps * num_gated)
    return torch.where(rows, torch.full(rows.shape, w), torch.zeros(rows.shape)).float()  # [B]


def rescue_nll(logps: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``Σ_i w_i · (−Σ_t ℓ_{i,t} m_{i,t} / max(1, Σ_t m_{i,t}))``: the weighted token-averaged NLL of the rescues.
    ``logps`` ``[R, T]`` (with grad), ``mask`` ``[R, T]``, ``weights`` ``[R]``; rows of weight 0 and masked positions
    add an exact 0 whatever their log-probs."""
    check_float("logps", logps, 2, "[R, T]")
    if mask.shape != logps.shape or weights.shape != logps.shape[:1]:
        raise ValueError(f"mask must be [R, T] = {tuple(logps.shape)} and weights [R]; got {tuple(mask.shape)} and "
                         f"{tuple(weights.shape)}")
    kept = torch.where(mask.bool(), logps, torch.zeros_like(logps))  # [R, T]
    nll = -kept.sum(1) / mask.bool().sum(1).clamp(min=1).to(logps.dtype)  # [R]
    w = weights.to(logps.dtype)  # [R]
    return torch.where(w != 0, w * nll, torch.zeros_like(nll)).sum()


class RescueBudget:
    """An adapter's rescues: the run's counters (saved with each checkpoint: ``state_dict``), the chosen successes
    attached to TRL's batch under ``prefix`` (``<prefix>_completion_ids``, ``_completion_mask``, ``_weight``) and
    their NLL term. ``trainer`` and ``names`` (the peers) are the adapter's."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.rescues_total = 0
        self.rescues_by_prompt: dict[str, int] = {}  # steps that rescued each prompt (the run's rescue budget)

    def state_dict(self) -> dict[str, Any]:
        """The run's total and, per prompt, the steps that rescued it (the budget)."""
        return {"rescues_total": self.rescues_total, "rescues_by_prompt": dict(sorted(self.rescues_by_prompt.items()))}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The saved counters; an empty state (a checkpoint saved before the regime had a rescue) starts afresh."""
        self.rescues_total = int(state.get("rescues_total", 0))
        self.rescues_by_prompt = {str(key): int(value) for key, value in state.get("rescues_by_prompt", {}).items()}

    def rescued_before(self, prompts: list[str]) -> torch.Tensor:
        """int64 ``[P]``: the earlier steps that rescued each prompt."""
        return torch.tensor([self.rescues_by_prompt.get(p, 0) for p in prompts], dtype=torch.long)

    def select(self, own_rewards: torch.Tensor, peer_rewards: torch.Tensor, prompts: list[str],
               success_threshold: float, failure_threshold: float, max_rescues: int | None,
               generator: torch.Generator, rollouts: StepRollouts) -> tuple[torch.Tensor, torch.Tensor]:
        """This step's rescues, counted against the budget: (``gated`` bool ``[P]``, :func:`rescue_gate`; ``chosen``
        int64 ``[P, 2]``, :func:`choose_rescues`). ``own_rewards`` ``[P, K]``, ``peer_rewards`` ``[P, M-1, K]``."""
        gated = rescue_gate(own_rewards, peer_rewards, success_threshold, failure_threshold,
                            self.rescued_before(prompts), max_rescues)  # [P]
        chosen = choose_rescues(peer_rewards, gated, success_threshold, generator)  # [P, 2]
        self.count(prompts, gated, rollouts)
        return gated, chosen

    def count(self, prompts: list[str], gated: torch.Tensor, rollouts: StepRollouts) -> None:
        """Count this step's rescued prompts, every rank's (a prompt may fall to another rank at its next visit)."""
        rescued = [prompt for prompt, hit in zip(prompts, gated.tolist(), strict=True) if hit]
        if rollouts.num_processes > 1:
            from accelerate.utils import gather_object

            rescued = gather_object(rescued)
        for prompt in rescued:
            self.rescues_by_prompt[prompt] = self.rescues_by_prompt.get(prompt, 0) + 1
        self.rescues_total += len(rescued)

    def attach(self, trainer: TrainerView, output: GRPOBatch, rollouts: StepRollouts, peers: dict[str, pa.Table],
               names: list[str], peer_rows: torch.Tensor, gated: torch.Tensor, chosen: torch.Tensor,
               lam: float) -> torch.Tensor:
        """The chosen peer successes in the learner's vocabulary (THL, EOS where the peer finished) on the first row
        of each rescued prompt, with their NLL weights; returns each row's rescue peer slot ``[B]`` (-1: none).
        ``peer_rows`` ``[P, M-1, K]``: each peer sample's row in its table; ``chosen`` ``[P, 2]``. A lone rank with no
        rescue leaves the batch as it is; with several ranks every rank attaches (the NLL's reduction is collective)."""
        k = rollouts.num_generations
        if not (bool(gated.any()) or rollouts.num_processes > 1):
            return torch.full((len(rollouts.prompt_ids_local),), -1, dtype=torch.long)
        gated_prompts = [p for p in range(len(gated)) if bool(gated[p])]
        sources = [(names[int(chosen[p, 0])], int(peer_rows[p, int(chosen[p, 0]), int(chosen[p, 1])]))
                   for p in gated_prompts]
        sequences = learner_responses(peers, sources, trainer.processing_class, trainer.max_completion_length).ids
        n = len(rollouts.prompt_ids_local)
        rows: list[list[int]] = [[] for _ in range(n)]
        source = torch.full((n,), -1, dtype=torch.long)  # [B]
        for p, ids in zip(gated_prompts, sequences, strict=True):
            rows[p * k], source[p * k] = ids, int(chosen[p, 0])  # one pair per prompt: its first row
        carried = source >= 0  # [B]
        num_gated = int(carried.sum())
        if rollouts.num_processes > 1:
            accelerator = trainer.accelerator
            num_gated = int(accelerator.reduce(torch.tensor(num_gated, device=accelerator.device), "sum").item())
        device = output["completion_ids"].device
        attach_sequences(output, rows, trainer.processing_class.pad_token_id, max([1] + [len(r) for r in rows]),
                         self.prefix)  # <prefix>_completion_ids, <prefix>_completion_mask: [B, R]
        weights = rescue_weights(carried, lam, trainer.args.steps_per_generation,
                                 trainer.current_gradient_accumulation_steps, num_gated, rollouts.num_processes)
        output[f"{self.prefix}_weight"] = weights.to(device)  # [B]
        return source

    def loss(self, trainer: TrainerView, model: torch.nn.Module, inputs: GRPOBatch, name: str) -> torch.Tensor | None:
        """``Σ_i w_i · NLL_θ(y*_i)`` over this micro-batch's rescued rows (``λ_r`` times their mean over the step), its
        metrics recorded under the regime's ``name`` (``nll_term``, ``rescue_logp``); None where no row carries a
        rescue."""
        attached = attached_rows(inputs, self.prefix, trainer.accelerator.num_processes)
        if attached is None:
            return None
        rows, completion, mask = attached  # [R], [R, T'], [R, T']
        weights = inputs[f"{self.prefix}_weight"]  # [B]
        logps = trainer.score_completions(model, inputs["prompt_ids"][rows], inputs["prompt_mask"][rows],
                                          completion, mask)  # [R, T']
        loss = rescue_nll(logps, mask, weights[rows])
        carried = weights[rows] > 0  # [R]
        values: dict[str, float] = {"nll_term": loss.detach().item()}
        if bool(carried.any()):
            kept = torch.where(mask.bool(), logps.detach(), torch.zeros_like(logps))  # [R, T']
            values["rescue_logp"] = Share(float(kept.sum(1)[carried].double().sum()), int(carried.sum()))
        trainer.record_metrics({f"{name}/{key}": value for key, value in values.items()},
                               mode="train" if model.training else "eval")
        return loss

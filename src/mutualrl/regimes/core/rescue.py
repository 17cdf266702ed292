"""SGT's rescue, the one implementation SGT, opd-sgt and byte-kd (with ``rescue_lam``) share: where every own
rollout of a prompt failed and a peer's succeeded, the learner adds ``λ`` times the NLL of one verified peer success,
retokenized into its vocabulary, optionally under a run-wide budget of steps per prompt (docs/regimes.md, "SGT").

The maths, in the order a step runs it:

1. :func:`own_failed` and :func:`is_success` — the two sides of the gate; :func:`rescue_gate` joins them, and
   :func:`within_budget` keeps the prompts not rescued ``max_rescues_per_prompt`` times before.
2. :func:`choose_rescues` — one peer success ``y*`` per gated prompt (uniform, or the shortest).
3. :func:`rescue_rows` — which learner rows carry it (SGT's per-prompt cap; one row elsewhere).
4. :func:`rescue_weights` — each row's weight, so that the summed term over one optimizer step is ``λ`` times the
   mean NLL over the rescued rows, however TRL cuts the batch.
5. :func:`rescue_nll` — the weighted NLL, per token (``mean``) or per answer (``sum``, the paper's L_SGT), added to
   TRL's loss; :func:`rescue_logprob` — the learner's log-prob of the rescued answers, a diagnostic.

:class:`RescueBudget` is an adapter's side (the counters a checkpoint saves, the rescues attached to TRL's batch,
the NLL term of a micro-batch). When no prompt is gated every step yields nothing (all-False masks, -1 choices,
zero weights, an exact zero loss).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import torch

from mutualrl.regimes.core.batch_rows import attach_sequences, attached_rows
from mutualrl.regimes.core.peer_responses import learner_responses
from mutualrl.regimes.core.rank_metrics import Share
from mutualrl.regimes.core.reward_shapes import check_float, check_same_shape, every_scored
from mutualrl.regimes.core.trainer_interface import GRPOBatch, StepRollouts, TrainerView

if TYPE_CHECKING:
    import pyarrow as pa

Reduction = Literal["mean", "sum"]


def is_success(rewards: torch.Tensor, success_threshold: float = 0.8) -> torch.Tensor:
    """Verified success: ``r > success_threshold`` (App. SGT: "responses with rewards above 0.8"); NaN → False."""
    return rewards > success_threshold


def own_failed(own_rewards: torch.Tensor, failure_threshold: float, require_all: bool = True) -> torch.Tensor:
    """bool ``[P]``: the learner failed the prompt (``own_rewards`` ``[P, K]``, NaN: unscored). Strict (the paper):
    every scored own rollout below ``failure_threshold``, at least one scored; else any one below it."""
    negative = own_rewards < failure_threshold  # [P, K] NaN → False
    return every_scored(negative, own_rewards) if require_all else negative.any(dim=1)  # [P]


def every_own_failed(own_rewards: torch.Tensor, failure_threshold: float) -> torch.Tensor:
    """bool ``[P]``: :func:`own_failed`, strict. The learner's blind spot on that prompt this step."""
    return own_failed(own_rewards, failure_threshold)  # [P]


def within_budget(gated: torch.Tensor, rescued_before: torch.Tensor, max_rescues: int | None) -> torch.Tensor:
    """bool ``[P]``: ``gated`` where ``rescued_before`` ``[P]`` (earlier steps that rescued the prompt) is below
    ``max_rescues`` (not in the paper, whose gate has no memory); None: ``gated`` unchanged."""
    check_same_shape("rescued_before", rescued_before, "gated", gated)
    if max_rescues is None:
        return gated
    if max_rescues < 1:
        raise ValueError(f"max_rescues_per_prompt must be >= 1 or unset; got {max_rescues}")
    return gated & (rescued_before < max_rescues)  # [P]


def rescue_gate(own_rewards: torch.Tensor, peer_rewards: torch.Tensor, success_threshold: float,
                failure_threshold: float, rescued_before: torch.Tensor, max_rescues: int | None,
                require_all_failed: bool = True) -> torch.Tensor:
    """bool ``[P]``: the prompts rescued this step. The learner failed (:func:`own_failed`), some peer rollout
    (``peer_rewards`` ``[P, M-1, K]``) is a verified success, and the prompt's budget is not spent
    (:func:`within_budget`)."""
    check_float("peer_rewards", peer_rewards, 3, "[P, M-1, K]")
    failed = own_failed(own_rewards, failure_threshold, require_all_failed)  # [P]
    peer_success = is_success(peer_rewards, success_threshold).flatten(1).any(-1)  # [P]
    return within_budget(failed & peer_success, rescued_before, max_rescues)  # [P]


def choose_rescues(peer_rewards: torch.Tensor, gated: torch.Tensor, success_threshold: float,
                   generator: torch.Generator | None, selection: Literal["random", "shortest"] = "random",
                   peer_lengths: torch.Tensor | None = None) -> torch.Tensor:
    """int64 ``[P, 2]``: ``(peer slot, sample index)`` of the success each gated prompt learns from; ``(-1, -1)`` off
    the gate. The peer slot indexes dim 1 of ``peer_rewards`` ``[P, M-1, K]``.

    - ``"random"``: ``y* ~ Uniform(S_x)``, uniform over every peer success of the prompt (not every peer): one draw
      ``u_x`` per prompt, gated or not, so ``generator`` advances the same every step; the chosen success is the
      ``⌊u_x · |S_x|⌋``-th in peer-major order.
    - ``"shortest"``: the success with the fewest tokens (``peer_lengths`` ``[P, M-1, K]``; App. SGT's "shorter-
      response heuristic"); ties go to the lowest peer slot, then the lowest sample index.
    """
    candidates = is_success(peer_rewards, success_threshold)  # [P, M-1, K]
    p, peers, k = candidates.shape
    if selection not in ("random", "shortest"):
        raise ValueError(f"rescue selection must be 'random' or 'shortest'; got {selection!r}")
    if selection == "random" and generator is None:
        raise ValueError("rescue selection 'random' needs a torch.Generator (no hidden global RNG state)")
    if selection == "shortest" and (peer_lengths is None or peer_lengths.shape != candidates.shape):
        got = tuple(peer_lengths.shape) if isinstance(peer_lengths, torch.Tensor) else type(peer_lengths).__name__
        raise ValueError(f"peer_lengths must have the peer shape [P, M-1, K] = {tuple(candidates.shape)}; got {got}")
    if peers * k == 0:  # no peers (M = 1): nothing can be gated
        return torch.full((p, 2), -1, dtype=torch.long, device=candidates.device)
    flat = candidates.reshape(p, peers * k) & gated.unsqueeze(1)  # [P, (M-1)·K]
    count = flat.sum(dim=1)  # [P]
    if selection == "random":
        u = torch.rand(p, generator=generator, device=generator.device,
                       dtype=torch.float64).to(candidates.device)  # [P]
        rank = torch.minimum((u * count).floor().long(), (count - 1).clamp(min=0))  # [P]
        # The (rank+1)-th True in row order: the first position where the running count reaches rank+1.
        hit = flat & (flat.long().cumsum(dim=1) == (rank + 1).unsqueeze(1))  # [P, (M-1)·K]
        position = hit.long().argmax(dim=1)  # [P]
    else:
        lengths = peer_lengths.reshape(p, peers * k).to(torch.float64)  # [P, (M-1)·K]
        keyed = torch.where(flat, lengths, torch.full_like(lengths, float("inf")))  # [P, (M-1)·K]
        position = keyed.argmin(dim=1)  # [P]
    chosen = torch.stack([position // k, position % k], dim=1).long()  # [P, 2]
    return torch.where((count > 0).unsqueeze(1), chosen, torch.full_like(chosen, -1))


def rescue_rows(gated: torch.Tensor, k: int, pairs_per_prompt: int = 1) -> torch.Tensor:
    """bool ``[P, K]``: the learner rows that carry their prompt's rescue, the first ``min(c, K)`` rows of a gated
    prompt (App. SGT "Packaging positive examples": "a per-prompt counter caps how many SGT pairs can be formed for
    the same prompt"; ``c`` is SGT's ``max_pairs_per_prompt``, 1 elsewhere). ``.reshape(-1)`` gives TRL's row order.

        rows[x, i] = gated(x) ∧ i < min(c, K)
    """
    if not isinstance(gated, torch.Tensor) or gated.dim() != 1 or gated.dtype != torch.bool:
        raise ValueError(f"gated must be a [P] bool tensor; got {getattr(gated, 'shape', type(gated).__name__)}")
    if k < 1:
        raise ValueError(f"K (rollouts per prompt) must be >= 1; got {k}")
    if pairs_per_prompt < 0:
        raise ValueError(f"max_pairs_per_prompt must be >= 0; got {pairs_per_prompt}")
    first = torch.arange(k, device=gated.device) < min(pairs_per_prompt, k)  # [K]
    return gated.unsqueeze(1) & first.unsqueeze(0)  # [P, K]


def rescue_weights(rows: torch.Tensor, lam: float, steps_per_generation: int, gradient_accumulation_steps: int,
                   num_gated: int | None = None, num_processes: int = 1,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``[B]``: the weight of each row's rescue NLL (App. SGT "Loss computation and combination with GRPO"),

        w_i = λ · S · N / (G · n)   on the ``rows`` (bool ``[B]``) that carry a rescue,   0 elsewhere (and if n = 0)

    TRL cuts the local generation batch into ``S = steps_per_generation`` micro-batches; ``G`` of them make an
    optimizer step (the current ``gradient_accumulation_steps``, which may be fewer at an epoch's end); DDP averages
    gradients over ``N = num_processes`` ranks. Normalising by ``n = num_gated`` rescued rows of the whole generation
    batch on every rank (default: this rank's), as TRL's dapo normalises by tokens, the summed term of one optimizer
    step is ``λ`` times the mean NLL over the rescued rows (exactly when ``S = G``, ``N = 1``: ``w_i = λ / n``). The
    caller adds :func:`rescue_nll` to TRL's loss as it is: the accumulation factor is inside ``w_i``."""
    if not isinstance(rows, torch.Tensor) or rows.dim() != 1 or rows.dtype != torch.bool:
        raise ValueError(f"rows must be a [B] bool tensor; got {getattr(rows, 'shape', type(rows).__name__)}")
    if steps_per_generation < 1 or gradient_accumulation_steps < 1 or num_processes < 1:
        raise ValueError("steps_per_generation, gradient_accumulation_steps and num_processes must be >= 1; got "
                         f"{steps_per_generation}, {gradient_accumulation_steps}, {num_processes}")
    if not lam >= 0:
        raise ValueError(f"the rescue's lambda must be >= 0; got {lam}")
    local = int(rows.sum())
    n = local if num_gated is None else int(num_gated)
    if n < local:
        raise ValueError(f"num_gated ({n}) is smaller than this rank's rescued rows ({local})")
    zeros = torch.zeros(rows.shape, dtype=dtype, device=rows.device)  # [B]
    if n == 0:
        return zeros
    w = lam * steps_per_generation * num_processes / (gradient_accumulation_steps * n)
    return torch.where(rows, torch.full(rows.shape, w, dtype=dtype, device=rows.device), zeros)  # [B]


def rescue_nll(logps: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor,
               reduction: Reduction = "mean") -> torch.Tensor:
    """The weighted NLL of the rescues (App. SGT "Loss computation"), a scalar:

        mean:  Σ_i w_i · (−Σ_t ℓ_{i,t} m_{i,t} / max(1, Σ_t m_{i,t}))     (per token: the default)
        sum:   Σ_i w_i · (−Σ_t ℓ_{i,t} m_{i,t})                          (per answer: the paper's −log π(y*|x))

    ``logps`` ``[R, T]`` (with grad) the learner's log-probs of the retokenized peer answers, ``mask`` ``[R, T]``,
    ``weights`` ``[R]`` (:func:`rescue_weights`). Rows of weight 0 and masked positions add an exact 0 whatever their
    log-probs (-inf, NaN), so all-zero weights give an exact 0 that still carries a graph. The ``max(1, ·)`` is TRL's
    ``clamp(min=1.0)``. Under ``mean`` the same answer weighs the same for every tokenizer; under ``sum`` it weighs
    by its token count."""
    check_float("logps", logps, 2, "[R, T]")
    check_same_shape("mask", mask, "logps", logps)
    if not isinstance(weights, torch.Tensor) or weights.shape != logps.shape[:1]:
        got = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"weights must have shape [R] = {tuple(logps.shape[:1])}; got {got}")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"rescue_reduction must be 'mean' or 'sum'; got {reduction!r}")
    kept_mask = mask.bool()  # [R, T]
    kept = torch.where(kept_mask, logps, torch.zeros_like(logps))  # [R, T]
    nll = -kept.sum(dim=1)  # [R]
    if reduction == "mean":
        nll = nll / kept_mask.sum(dim=1).clamp(min=1).to(logps.dtype)  # [R]
    w = weights.to(logps.dtype)  # [R]
    return torch.where(w != 0, w * nll, torch.zeros_like(nll)).sum()


def rescue_logprob(logps: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor) -> Share:
    """The learner's mean sequence log-prob ``log π_θ(y* | x) = Σ_t ℓ_t`` of the rescued answers, over the rows of
    ``weights`` > 0 (``logps``, ``mask`` ``[R, T]``): whether the rescue moves the learner at all. A :class:`Share`
    (the sum and the row count; NaN with no row), so that over several ranks it is the mean over every rank's rows."""
    check_float("logps", logps, 2, "[R, T]")
    check_same_shape("mask", mask, "logps", logps)
    rows = weights > 0  # [R]
    kept_mask = mask[rows].bool()  # [R', T]
    kept = torch.where(kept_mask, logps[rows], torch.zeros_like(logps[rows]))  # [R', T]
    return Share(float(kept.sum(dim=1).double().sum()), int(rows.sum()))


class RescueBudget:
    """An adapter's rescues: the run's counters (saved with each checkpoint: ``state_dict``), the chosen successes
    attached to TRL's batch under ``prefix`` (``<prefix>_completion_ids``, ``_completion_mask``, ``_weight``) and
    their NLL term, reduced over each answer's tokens by ``reduction`` (:func:`rescue_nll`). ``trainer`` and ``names``
    (the peers) are the adapter's."""

    def __init__(self, prefix: str, reduction: Reduction = "mean"):
        self.prefix = prefix
        self.reduction = reduction
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

    def count(self, prompts: list[str], gated: torch.Tensor, rollouts: StepRollouts, per_prompt: bool = True) -> int:
        """Count this step's rescued prompts, every rank's (a prompt may fall to another rank at its next visit), and
        return how many. ``per_prompt`` False keeps the total only (SGT without a budget: no count per prompt)."""
        rescued = [prompt for prompt, hit in zip(prompts, gated.tolist(), strict=True) if hit]
        if rollouts.num_processes > 1:
            from accelerate.utils import gather_object

            rescued = gather_object(rescued)
        if per_prompt:
            for prompt in rescued:
                self.rescues_by_prompt[prompt] = self.rescues_by_prompt.get(prompt, 0) + 1
        self.rescues_total += len(rescued)
        return len(rescued)

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
        loss = rescue_nll(logps, mask, weights[rows], self.reduction)
        values: dict[str, float] = {"nll_term": loss.detach().item()}
        if bool((weights[rows] > 0).any()):
            values["rescue_logp"] = rescue_logprob(logps.detach(), mask, weights[rows])
        trainer.record_metrics({f"{name}/{key}": value for key, value in values.items()},
                               mode="train" if model.training else "eval")
        return loss

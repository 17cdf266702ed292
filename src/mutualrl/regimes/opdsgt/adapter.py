"""Adapter of on-policy distillation with a rescue (``opd-sgt``): every policy judges its peers' rollouts and learns
from their judgements of its own (OPD's exchange), and where its whole group failed, from one verified peer success
(SGT's rescue), in one loss.

Per step, lock-step (docs/regimes.md, "Beyond the paper: OPD with SGT's rescue"):

1. publish this rank's rollout records with their token spans and read the peers' round (the base adapter);
2. judge every peer rollout of this rank's groups with this policy's model and publish the judgements; read the
   peers' judgements of this policy's rollouts and move them onto its tokens (THL);
3. per prompt: the teaching peer (:func:`~mutualrl.regimes.opdsgt.maths.teacher_weights`) and the rescue gate
   (:func:`~mutualrl.regimes.opdsgt.maths.rescue_gate`, under the run's rescue budget);
4. write TRL's per-token advantages ``A_i + λ Σ_j w δ^j_t`` and attach the chosen peer success, retokenized, to the
   first row of each rescued prompt; :meth:`OPDSGTAdapter.extra_loss` adds ``λ_r`` times its NLL to TRL's loss.

With ``lam: 0`` and ``rescue_lam: 0`` step 4 is skipped: the batch TRL trains on is standalone GRPO's, bit for bit
(the judging still runs, at no gradient).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import torch

from mutualrl.regimes.api import (
    GRPOBatch,
    JudgedAdapter,
    Share,
    StepRollouts,
    aligned_judgements,
    attach_sequences,
    attached_rows,
    gather_peer_groups,
    learner_responses,
    own_logps,
)
from mutualrl.regimes.opdsgt.spec import OPD_SGT, OPDSGTSettings

if TYPE_CHECKING:
    import pyarrow as pa

PREFIX: Final = "opdsgt"
"""The prefix of the batch keys this regime adds (``opdsgt_completion_ids``, ...: ``spec.OPDSGTBatch``)."""


class OPDSGTAdapter(JudgedAdapter):
    spec = OPD_SGT
    settings: OPDSGTSettings  # typed view of RegimeAdapter.settings

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.rescues_total = 0
        self.rescues_by_prompt: dict[str, int] = {}  # steps that rescued each prompt (the run's rescue budget)

    def state_dict(self) -> dict[str, Any]:
        """The rescue counters: the run's total and, per prompt, the steps that rescued it (the budget)."""
        return {"rescues_total": self.rescues_total, "rescues_by_prompt": dict(sorted(self.rescues_by_prompt.items()))}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rescues_total = int(state["rescues_total"])
        self.rescues_by_prompt = {str(key): int(value) for key, value in state.get("rescues_by_prompt", {}).items()}

    def transform(self, output: GRPOBatch, rollouts: StepRollouts,
                  peers: dict[str, pa.Table]) -> tuple[GRPOBatch, dict[str, float]]:
        from mutualrl.regimes.opdsgt.maths import (
            choose_rescues,
            combined_advantages,
            distillation_signal,
            rescue_gate,
            signal_metrics,
            source_use,
            step_metrics,
            teacher_weights,
        )

        settings, trainer, step = self.settings, self.trainer, rollouts.step
        _, tables = self.exchange_judgements(output, rollouts, peers)

        k = rollouts.num_generations
        prompts = rollouts.prompt_ids_local[::k]
        own_rewards = rollouts.rewards_local.float().view(len(prompts), k)  # [P, K]
        peer_rewards = gather_peer_groups(peers, self.peers, prompts, k, step, columns=("reward",))
        rewards = peer_rewards.values["reward"]  # [P, M-1, K]
        prompt_weights = teacher_weights(own_rewards, rewards, settings.success_threshold)  # [P, M-1]
        before = torch.tensor([self.rescues_by_prompt.get(p, 0) for p in prompts], dtype=torch.long)  # [P]
        gated = rescue_gate(own_rewards, rewards, settings.success_threshold, settings.failure_threshold, before,
                            settings.max_rescues_per_prompt)  # [P]
        chosen = choose_rescues(rewards, gated, settings.success_threshold, self.seeded_generator(step, self.name))
        self._count_rescues(prompts, gated, rollouts)
        mask = output["completion_mask"]  # [B, C]
        aligned = aligned_judgements(self.own_records, tables, self.peers, rollouts, mask.shape[1])
        weights = prompt_weights.repeat_interleave(k, dim=0) * aligned.matched  # [B, M-1]
        metrics = {**step_metrics(prompt_weights, gated, aligned.matched), "rescues_total": self.rescues_total}
        source = torch.full((len(rollouts.prompt_ids_local),), -1, dtype=torch.long)  # [B] the rescue's peer slot
        if settings.lam == 0 and settings.rescue_lam == 0:  # standalone GRPO's batch, untouched
            zero = [torch.zeros_like(mask, dtype=torch.float32).cpu()] * len(self.peers)
            return output, {**metrics, **source_use(zero, source, self.peers)}
        own = own_logps(trainer, output).float().cpu()  # [B, C]
        signal = distillation_signal(own, aligned.values, aligned.valid, weights, aligned.groups)  # [B, C]
        advantages = output["advantages"]
        output["advantages"] = combined_advantages(advantages.cpu(), signal, mask.cpu(),
                                                   settings.lam).to(advantages.device)  # [B, C]
        if settings.rescue_lam > 0 and (bool(gated.any()) or rollouts.num_processes > 1):
            source = self._attach_rescues(output, rollouts, peer_rewards.rows, gated, chosen, peers)
        by_peer = [settings.lam * distillation_signal(own, aligned.values, aligned.valid, self._only(weights, j),
                                                      aligned.groups) for j in range(len(self.peers))]  # [B, C] each
        metrics.update(signal_metrics(own, aligned.values, aligned.valid, weights, settings.lam, signal))
        return output, {**metrics, **source_use(by_peer, source, self.peers)}

    @staticmethod
    def _only(weights: torch.Tensor, j: int) -> torch.Tensor:
        """``weights`` ``[B, M-1]`` with every column but peer ``j``'s set to 0."""
        only = torch.zeros_like(weights)  # [B, M-1]
        only[:, j] = weights[:, j]
        return only

    def _count_rescues(self, prompts: list[str], gated: torch.Tensor, rollouts: StepRollouts) -> None:
        """Count this step's rescued prompts, every rank's (a prompt may fall to another rank at its next visit)."""
        rescued = [prompt for prompt, hit in zip(prompts, gated.tolist(), strict=True) if hit]
        if rollouts.num_processes > 1:
            from accelerate.utils import gather_object

            rescued = gather_object(rescued)
        for prompt in rescued:
            self.rescues_by_prompt[prompt] = self.rescues_by_prompt.get(prompt, 0) + 1
        self.rescues_total += len(rescued)

    def _attach_rescues(self, output: GRPOBatch, rollouts: StepRollouts, peer_rows: torch.Tensor,
                        gated: torch.Tensor, chosen: torch.Tensor, peers: dict[str, pa.Table]) -> torch.Tensor:
        """The chosen peer successes in the learner's vocabulary (THL, EOS where the peer finished) on the first row
        of each rescued prompt, with their NLL weights; returns each row's rescue peer slot ``[B]`` (-1: none)."""
        from mutualrl.regimes.opdsgt.maths import rescue_weights

        trainer, k = self.trainer, rollouts.num_generations
        gated_prompts = [p for p in range(len(gated)) if bool(gated[p])]
        sources = [(self.peers[int(chosen[p, 0])], int(peer_rows[p, int(chosen[p, 0]), int(chosen[p, 1])]))
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
                         PREFIX)  # opdsgt_completion_ids, opdsgt_completion_mask: [B, R]
        weights = rescue_weights(carried, self.settings.rescue_lam, trainer.args.steps_per_generation,
                                 trainer.current_gradient_accumulation_steps, num_gated, rollouts.num_processes)
        output[f"{PREFIX}_weight"] = weights.to(device)  # [B]
        return source

    def extra_loss(self, model: torch.nn.Module, inputs: GRPOBatch) -> torch.Tensor | None:
        """``Σ_i w_i · NLL_θ(y*_i)`` over this micro-batch's rescued rows (``λ_r`` times their mean over the step)."""
        attached = attached_rows(inputs, PREFIX, self.trainer.accelerator.num_processes)
        if attached is None:
            return None
        from mutualrl.regimes.opdsgt.maths import rescue_nll

        rows, completion, mask = attached  # [R], [R, T'], [R, T']
        weights = inputs[f"{PREFIX}_weight"]  # [B]
        logps = self.trainer.score_completions(model, inputs["prompt_ids"][rows], inputs["prompt_mask"][rows],
                                               completion, mask)  # [R, T']
        loss = rescue_nll(logps, mask, weights[rows])
        carried = weights[rows] > 0  # [R]
        values = {"nll_term": loss.detach().item()}
        if bool(carried.any()):
            kept = torch.where(mask.bool(), logps.detach(), torch.zeros_like(logps))  # [R, T']
            values["rescue_logp"] = Share(float(kept.sum(1)[carried].double().sum()), int(carried.sum()))
        self.trainer.record_metrics({f"{self.name}/{key}": value for key, value in values.items()},
                                    mode="train" if model.training else "eval")
        return loss

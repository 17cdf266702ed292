"""Adapter of on-policy distillation with a rescue (``opd-sgt``): every policy judges its peers' rollouts and learns
from their judgements of its own (OPD's exchange), and where its whole group failed, from one verified peer success
(SGT's rescue), in one loss.

Per step, lock-step (docs/regimes.md, "Beyond the paper: OPD with SGT's rescue"):

1. publish this rank's rollout records with their token spans and read the peers' round (the base adapter);
2. judge every peer rollout of this rank's groups with this policy's model and publish the judgements; read the
   peers' judgements of this policy's rollouts and move them onto its tokens (THL);
3. per prompt: the teaching peer (:func:`~mutualrl.regimes.opdsgt.maths.teacher_weights`) and the rescue gate
   (:meth:`~mutualrl.regimes.core.rescue.RescueBudget.select`, under the run's rescue budget);
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
    RescueBudget,
    StepRollouts,
    aligned_judgements,
    gather_peer_groups,
    own_logps,
    signal_row_scale,
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
        self.rescues = RescueBudget(PREFIX, self.settings.rescue_reduction)

    def state_dict(self) -> dict[str, Any]:
        """The rescue counters: the run's total and, per prompt, the steps that rescued it (the budget)."""
        return self.rescues.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rescues.load_state_dict(state)

    def transform(self, output: GRPOBatch, rollouts: StepRollouts,
                  peers: dict[str, pa.Table]) -> tuple[GRPOBatch, dict[str, float]]:
        from mutualrl.regimes.opdsgt.maths import (
            combined_advantages,
            distillation_signal,
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
        gated, chosen = self.rescues.select(own_rewards, rewards, prompts, settings.success_threshold,
                                            settings.failure_threshold, settings.max_rescues_per_prompt,
                                            self.seeded_generator(step, self.name), rollouts)  # [P], [P, 2]
        mask = output["completion_mask"]  # [B, C]
        aligned = aligned_judgements(self.own_records, tables, self.peers, rollouts, mask.shape[1])
        weights = prompt_weights.repeat_interleave(k, dim=0) * aligned.matched  # [B, M-1]
        metrics = {**step_metrics(prompt_weights, gated, aligned.matched), "rescues_total": self.rescues.rescues_total}
        source = torch.full((len(rollouts.prompt_ids_local),), -1, dtype=torch.long)  # [B] the rescue's peer slot
        if settings.lam == 0 and settings.rescue_lam == 0:  # standalone GRPO's batch, untouched
            zero = [torch.zeros_like(mask, dtype=torch.float32).cpu()] * len(self.peers)
            return output, {**metrics, **source_use(zero, source, self.peers)}
        own = own_logps(trainer, output).float().cpu()  # [B, C]
        scale = signal_row_scale(trainer.loss_type, mask.cpu(), trainer.max_completion_length or mask.shape[1],
                                 self._items(output), rollouts.num_processes)[:, None]  # [B, 1]
        signal = distillation_signal(own, aligned.values, aligned.valid, weights, aligned.groups) * scale  # [B, C]
        advantages = output["advantages"]
        output["advantages"] = combined_advantages(advantages.cpu(), signal, mask.cpu(),
                                                   settings.lam).to(advantages.device)  # [B, C]
        if settings.rescue_lam > 0:
            source = self.rescues.attach(trainer, output, rollouts, peers, self.peers, peer_rewards.rows, gated, chosen,
                                         settings.rescue_lam)
        by_peer = [settings.lam * scale * distillation_signal(own, aligned.values, aligned.valid,
                                                              self._only(weights, j), aligned.groups)
                   for j in range(len(self.peers))]  # [B, C] each
        metrics.update(signal_metrics(own, aligned.values, aligned.valid, weights, settings.lam, signal))
        return output, {**metrics, **source_use(by_peer, source, self.peers)}

    @staticmethod
    def _only(weights: torch.Tensor, j: int) -> torch.Tensor:
        """``weights`` ``[B, M-1]`` with every column but peer ``j``'s set to 0."""
        only = torch.zeros_like(weights)  # [B, M-1]
        only[:, j] = weights[:, j]
        return only

    def extra_loss(self, model: torch.nn.Module, inputs: GRPOBatch) -> torch.Tensor | None:
        """``Σ_i w_i · NLL_θ(y*_i)`` over this micro-batch's rescued rows (``λ_r`` times their mean over the step)."""
        return self.rescues.loss(self.trainer, model, inputs, self.name)

"""The random-perturbation control's adapter (App. "Ablation: shared normalization for XGRPO").

It only rewrites TRL's ``advantages`` (GRPO with a randomly perturbed baseline); it reads no peer
but publishes its records to the SEE (``needs_exchange`` in its spec).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mutualrl.regimes.api import GRPOBatch, RegimeAdapter, Share, StepRollouts
from mutualrl.regimes.randpert.spec import RANDPERT, RandPertSettings

if TYPE_CHECKING:
    import pyarrow as pa


class RandPertAdapter(RegimeAdapter):
    """GRPO + random baseline perturbation (App. "Ablation: shared normalization for XGRPO")."""

    spec = RANDPERT
    settings: RandPertSettings  # typed view of RegimeAdapter.settings

    def transform(self, output: GRPOBatch, rollouts: StepRollouts,
                  peers: dict[str, pa.Table]) -> tuple[GRPOBatch, dict[str, float]]:
        from mutualrl.regimes.randpert.maths import randpert_advantages

        k = rollouts.num_generations
        groups = len(rollouts.group_prompt_ids)
        generator = self.seeded_generator(rollouts.step)
        settings = self.settings
        advantages = randpert_advantages(rollouts.rewards_global.view(groups, k), settings.scale, generator,
                                         scale_rewards=self.trainer.scale_rewards,
                                         skip_uniform_groups=settings.skip_uniform_groups)
        before = output["advantages"]
        after = advantages.reshape(-1)[rollouts.local_rows].to(before.device, before.dtype)
        output["advantages"] = after
        change = (after - before).abs()  # [B_local]
        return output, {"mean_abs_adv_change": Share(change.double().sum().item(), change.numel())}

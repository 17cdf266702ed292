"""XGRPO's adapter (paper Sec. "Regime 2"): pooled reward statistics in TRL's advantages.

It only rewrites TRL's ``advantages``; the actor stays strictly on-policy (paper: "generation is
local, but evaluation is global"). Subscribes to the peers' scalar rewards only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mutualrl.regimes.api import GRPOBatch, RegimeAdapter, StepRollouts, gather_peer_groups
from mutualrl.regimes.xgrpo.spec import XGRPO, XGRPOSettings

if TYPE_CHECKING:
    import pyarrow as pa


class XGRPOAdapter(RegimeAdapter):
    """Cross-policy GRPO advantage sharing; subscribes to peers' scalar rewards only."""

    spec = XGRPO
    peer_columns = ("prompt_id", "sample_index", "reward")
    settings: XGRPOSettings  # typed view of RegimeAdapter.settings

    def transform(self, output: GRPOBatch, rollouts: StepRollouts,
                  peers: dict[str, pa.Table]) -> tuple[GRPOBatch, dict[str, float]]:
        from mutualrl.regimes.xgrpo.maths import xgrpo_advantages

        settings = self.settings
        k = rollouts.num_generations
        groups = rollouts.group_prompt_ids
        order = self.pool_order
        learner_index = order.index(self.policy)
        peer = gather_peer_groups(peers, [n for n in order if n != self.policy], groups, k, rollouts.step)
        pool = peer.pool(rollouts.rewards_global.view(len(groups), k), learner_index)
        result = xgrpo_advantages(
            pool, learner_index, rollouts.lengths_global.view(len(groups), k),
            cross_model_factor=settings.cross_model_factor, length_correction=settings.length_correction,
            advantage_clip=settings.advantage_clip, scale_rewards=self.trainer.scale_rewards,
            eps=settings.std_epsilon, normalisation=settings.normalisation,
        )
        advantages = result.advantages.reshape(-1)[rollouts.local_rows]
        output["advantages"] = advantages.to(output["advantages"].device, output["advantages"].dtype)
        return output, result.metrics()

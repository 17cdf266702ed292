"""Value-level adapters: XGRPO (pooled reward statistics) and the random-perturbation control.

Both only rewrite TRL's ``advantages``; the actor stays strictly on-policy (paper, Sec.
"Regime 2": "generation is local, but evaluation is global").
"""

from __future__ import annotations

from typing import Any

import torch

from mutualrl.regimes.randpert_spec import RANDPERT
from mutualrl.regimes.xgrpo_spec import XGRPO
from mutualrl.training.adapters.base import (
    RegimeAdapter,
    peer_groups,
    peer_values,
    stable_seed,
)


def local_slice(rollouts: Any) -> slice:
    n_local = len(rollouts.prompt_ids_local)
    return slice(rollouts.process_index * n_local, (rollouts.process_index + 1) * n_local)


class XGRPOAdapter(RegimeAdapter):
    """Cross-policy GRPO advantage sharing; subscribes to peers' scalar rewards only."""

    spec = XGRPO
    peer_columns = ("prompt_id", "sample_index", "reward")

    def transform(self, output, rollouts, peers):
        from mutualrl.regimes.xgrpo import xgrpo_advantages

        settings = self.config.regime.xgrpo
        k = rollouts.num_generations
        groups = rollouts.group_prompt_ids
        learner = rollouts.rewards_global.view(len(groups), k)
        pool = torch.empty(len(groups), len(self.pool_order), k, dtype=torch.float32)
        for m, name in enumerate(self.pool_order):
            if name == self.policy:
                pool[:, m] = learner
                continue
            table = peers[name]
            pool[:, m] = peer_values(table, "reward", peer_groups(table, groups, k, name, rollouts.step))
        result = xgrpo_advantages(
            pool, self.pool_order.index(self.policy), rollouts.lengths_global.view(len(groups), k),
            cross_model_factor=settings.cross_model_factor, length_correction=settings.length_correction,
            advantage_clip=settings.advantage_clip, scale_rewards=self.trainer.scale_rewards,
            eps=settings.std_epsilon, normalisation=settings.normalisation,
        )
        advantages = result.advantages.reshape(-1)[local_slice(rollouts)]
        output["advantages"] = advantages.to(output["advantages"].device, output["advantages"].dtype)
        return output, result.metrics()

    @property
    def pool_order(self) -> list[str]:
        return [p.name for p in self.config.pool.policies]


class RandPertAdapter(RegimeAdapter):
    """GRPO + random baseline perturbation (App. "Ablation: shared normalization for XGRPO")."""

    spec = RANDPERT

    def transform(self, output, rollouts, peers):
        from mutualrl.regimes.randpert import randpert_advantages

        k = rollouts.num_generations
        groups = len(rollouts.group_prompt_ids)
        generator = torch.Generator().manual_seed(stable_seed(self.trainer.args.seed, rollouts.step, self.policy))
        settings = self.config.regime.randpert
        advantages = randpert_advantages(rollouts.rewards_global.view(groups, k), settings.scale, generator,
                                         scale_rewards=self.trainer.scale_rewards,
                                         skip_uniform_groups=settings.skip_uniform_groups)
        before = output["advantages"]
        after = advantages.reshape(-1)[local_slice(rollouts)].to(before.device, before.dtype)
        output["advantages"] = after
        return output, {"mean_abs_adv_change": (after - before).abs().mean().item()}

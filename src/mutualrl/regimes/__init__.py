"""The sharing regimes (paper Sec. "Three Controlled Probes"): pure functions over tensors.

- :mod:`~mutualrl.regimes.grpo` — standalone GRPO advantages, TRL-exact (Sec. "Preliminaries").
- :mod:`~mutualrl.regimes.prp` — Peer Rollout Pooling (Regime 1): pooled advantages, ratios, diagnostics.
- :mod:`~mutualrl.regimes.xgrpo` — cross-policy advantage sharing (Regime 2) and its shuffled-pool control.
- :mod:`~mutualrl.regimes.sgt` — Success-Gated Transfer (Regime 3): gate, selection, weights, NLL, metrics.
- :mod:`~mutualrl.regimes.randpert` — GRPO + random baseline perturbation (App. "Ablation: shared normalization").
- :mod:`~mutualrl.regimes.pool` — the ``[P, K]`` / ``[P, M, K]`` layout and its checks.
- :mod:`~mutualrl.regimes.registry` — one :class:`RegimeSpec` per regime, registered by the torch-free
  ``<regime>_spec.py`` modules (settings, metric names, adapter path); docs/architecture.md.

Rewards of one learner are ``[P, K]`` (P prompts, K rollouts, TRL's prompt-major row order when
flattened); a pool is ``[P, M, K]``; peers are ``[P, M-1, K]``. NaN marks an unscorable reward,
as in TRL: it is left out of every statistic and its advantage is 0. See docs/regimes.md.
"""

import importlib
from typing import Any

# The maths imports torch; it is imported on first use, so that the torch-free registry
# (``regimes.registry`` and the ``*_spec`` modules) stays cheap for config loading and the CLI.
_LAZY = {
    ".grpo": ("TRL_STD_EPS", "group_advantages", "nanstd", "trl_rewards"),
    ".pool": ("join_pool", "peer_policy_index", "split_pool"),
    ".prp": ("Usability", "peer_log_ratio", "prp_behaviour_logps", "prp_pooled_advantages", "ratio_statistics",
            "regime_usability"),
    ".randpert": ("randpert_advantages",),
    ".sgt": ("SGTGate", "assign_sgt_rows", "select_peer_successes", "sgt_example_weights", "sgt_gate", "sgt_metrics",
            "sgt_nll"),
    ".xgrpo": ("XGRPOResult", "shuffled_pool_control", "xgrpo_advantages"),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


__all__ = [
    "TRL_STD_EPS",
    "SGTGate",
    "Usability",
    "XGRPOResult",
    "assign_sgt_rows",
    "group_advantages",
    "join_pool",
    "nanstd",
    "peer_log_ratio",
    "peer_policy_index",
    "prp_behaviour_logps",
    "prp_pooled_advantages",
    "randpert_advantages",
    "ratio_statistics",
    "regime_usability",
    "select_peer_successes",
    "sgt_example_weights",
    "sgt_gate",
    "sgt_metrics",
    "sgt_nll",
    "shuffled_pool_control",
    "split_pool",
    "trl_rewards",
    "xgrpo_advantages",
]

"""What the specs of the regimes that distil per token (OPD, opd-sgt) share: the refusal of GSPO's sequence ratio.

Their signal is per token; GSPO's sequence ratio (``importance_sampling_level: sequence``) carries the gradient of the
tokens' mean log-prob, so TRL would train every token with the row's mean advantage, not its own signal."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def per_token_ratio_check(regime: str) -> Callable[[Mapping[str, Any]], tuple[str, str] | None]:
    """A spec's ``grpo_check`` for ``regime``: refuses ``importance_sampling_level: sequence``, naming the regime."""

    def check(grpo: Mapping[str, Any]) -> tuple[str, str] | None:
        if grpo.get("importance_sampling_level") == "sequence":
            return "importance_sampling_level", (f"'sequence' (GSPO) under regime {regime}: TRL's sequence ratio "
                                                 "averages the tokens' log-ratios, so every token would train with "
                                                 "the mean of the row's per-token advantages, not its own "
                                                 "distillation signal; use 'token' (TRL's default)")
        return None

    return check

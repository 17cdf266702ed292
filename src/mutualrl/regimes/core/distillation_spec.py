"""What the specs of the regimes that distil per token (OPD, opd-sgt) share: the refusal of GSPO's sequence ratio and
of a sampler that is not the model's distribution.

Their signal is per token; GSPO's sequence ratio (``importance_sampling_level: sequence``) carries the gradient of the
tokens' mean log-prob, so TRL would train every token with the row's mean advantage, not its own signal. Their
signal is a score-function estimate under the model's own distribution: a truncating sampler (``top_p``, ``top_k``,
``min_p``) or a logit processor (``repetition_penalty``, ...) draws from another one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

SIGNAL_LOSS_TYPES = ("grpo", "sapo", "dr_grpo", "dapo", "cispo")
"""TRL's loss types under which a row's weight in the loss is known when the batch is built and whose gradient at the
snapshot (ratio 1) is ``−A ∇ log π`` per token, so a per-token distillation signal in the advantages is exact
(:func:`mutualrl.regimes.core.distillation.signal_row_scale`): ``bnpo`` divides by a micro-batch's tokens, unknown
then; ``vespo`` reweights by its own gamma weights; ``luspo`` needs GSPO's sequence ratio."""


def per_token_ratio_check(regime: str) -> Callable[[Mapping[str, Any]], tuple[str, str] | None]:
    """A spec's ``grpo_check`` for ``regime``: refuses a truncating or processed sampler and
    ``importance_sampling_level: sequence``, naming the regime."""

    def check(grpo: Mapping[str, Any]) -> tuple[str, str] | None:
        from mutualrl.regimes.core.sampling import distorting_processors, shown, truncating_sampling

        reshaped = truncating_sampling(grpo) + distorting_processors(grpo)
        if reshaped:
            return reshaped[0][0].split(".")[0], (
                f"{shown(reshaped)} under regime {regime}: samples are drawn from the truncated or processed "
                "distribution while the signal reads the model's unprocessed log-probs, so it estimates the "
                "gradient of no divergence; sample untruncated and unprocessed (top_p 1, top_k 0, min_p unset, "
                "repetition_penalty 1)")
        loss_type = grpo.get("loss_type")
        if loss_type is not None and loss_type not in SIGNAL_LOSS_TYPES:
            return "loss_type", (f"{loss_type!r} under regime {regime}: its per-token distillation signal is exact "
                                 f"only where TRL's weight of each row is known when the batch is built "
                                 f"({', '.join(SIGNAL_LOSS_TYPES)}; docs/regimes.md)")
        if grpo.get("importance_sampling_level") == "sequence":
            return "importance_sampling_level", (f"'sequence' (GSPO) under regime {regime}: TRL's sequence ratio "
                                                 "averages the tokens' log-ratios, so every token would train with "
                                                 "the mean of the row's per-token advantages, not its own "
                                                 "distillation signal; use 'token' (TRL's default)")
        return None

    return check

"""What the specs of the regimes that distil per token (OPD, opd-sgt) share: the refusal of GSPO's sequence ratio, of a
sampler that is not the model's distribution and of TRL's token and sequence masks.

Their signal is per token; GSPO's sequence ratio (``importance_sampling_level: sequence``) carries the gradient of the
tokens' mean log-prob, so TRL would train every token with the row's mean advantage, not its own signal. Their
signal is a score-function estimate under the model's own distribution: a truncating sampler (``top_p``, ``top_k``,
``min_p``) or a logit processor (``repetition_penalty``, ...) draws from another one. TRL 1.16 multiplies the per-token
policy loss by two masks: ``top_entropy_quantile`` < 1 zeroes it on the tokens below that entropy quantile, and
``off_policy_mask_threshold`` keeps a token whose advantage is >= 0 or whose row is near the sampler (per token with
OPD's per-token advantages), so either drops part of the signal and the rest is no gradient of the divergence."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

SIGNAL_LOSS_TYPES = ("grpo", "sapo", "dr_grpo", "dapo", "cispo")
"""TRL's loss types under which a row's weight in the loss is known when the batch is built and whose gradient at the
snapshot (ratio 1) is ``−A ∇ log π`` per token, so a per-token distillation signal in the advantages is exact
(:func:`mutualrl.regimes.core.distillation.signal_row_scale`): ``bnpo`` divides by a micro-batch's tokens, unknown
then; ``vespo`` reweights by its own gamma weights; ``luspo`` needs GSPO's sequence ratio."""


def per_token_ratio_check(regime: str) -> Callable[[Mapping[str, Any]], tuple[str, str] | None]:
    """A spec's ``grpo_check`` for ``regime``: refuses a truncating or processed sampler, a loss type without a known
    row weight, ``top_entropy_quantile`` < 1, ``off_policy_mask_threshold`` and ``importance_sampling_level:
    sequence``, naming the regime."""

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
        quantile = grpo.get("top_entropy_quantile")
        if quantile is not None and float(quantile) < 1:
            return "top_entropy_quantile", (f"{quantile} under regime {regime}: TRL zeroes the policy loss on the "
                                            "tokens below that entropy quantile, so their distillation signal is "
                                            "dropped and the rest estimates the gradient of no divergence; use 1.0 "
                                            "(TRL's default)")
        if grpo.get("off_policy_mask_threshold") is not None:
            return "off_policy_mask_threshold", (f"{grpo['off_policy_mask_threshold']} under regime {regime}: with "
                                                 "per-token advantages TRL's off-policy mask drops the tokens of "
                                                 "negative signal in a row far from the sampler and keeps the "
                                                 "positive ones, a one-sided cut of the distillation signal; leave "
                                                 "it unset (TRL's default)")
        if grpo.get("importance_sampling_level") == "sequence":
            return "importance_sampling_level", (f"'sequence' (GSPO) under regime {regime}: TRL's sequence ratio "
                                                 "averages the tokens' log-ratios, so every token would train with "
                                                 "the mean of the row's per-token advantages, not its own "
                                                 "distillation signal; use 'token' (TRL's default)")
        return None

    return check

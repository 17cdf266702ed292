"""Importance-ratio figures of rows a learner did not sample itself, shared by the regimes that train on them (PRP,
HACPO): the ratio diagnostics of the paper's App. "Importance-ratio distribution under the THL-aligned denominator"
(:func:`ratio_statistics`) and the effective sample size of a set of weights (:func:`normalised_ess`). Pure
functions of tensors and floats.
"""

from __future__ import annotations

import math

import torch

from mutualrl.regimes.core.reward_shapes import check_float, check_same_shape
from mutualrl.regimes.core.rank_metrics import Quantile, Share


def ratio_statistics(
    ratios: torch.Tensor, mask: torch.Tensor, epsilon: float = 0.2, epsilon_high: float | None = None
) -> dict[str, float]:
    """Importance-ratio diagnostics of App. "Importance-ratio distribution under the THL-aligned denominator".

    Over the masked tokens ``t`` of responses ``b`` (ratio ``w_{b,t} = exp(log-ratio)``):

    - ``token_ratio_p99``: 99th percentile of ``w_{b,t}`` (linear interpolation);
    - ``token_clip_rate``: fraction of tokens with ``w < 1 - ε_low`` or ``w > 1 + ε_high`` (PPO clip band,
      compared in the ratios' dtype like TRL's clamp);
    - ``resp_any_ratio_gt10``: fraction of responses with some token ratio ``> 10``;
    - ``seq_ratio_median`` / ``seq_ratio_p99`` / ``seq_clip_rate``: the same for the sequence ratio
      ``W_b = exp(Σ_t log w_{b,t})`` (App. theory: ``exp{L_θ - L_behavior}``).

    Responses without masked tokens are left out; an empty selection gives NaN. NaN token ratios
    (unaligned tokens) are left out of the token statistics and make their sequence ratio NaN,
    which is left out too; ``nan_token_frac`` reports how many there were. The rates are
    :class:`~mutualrl.regimes.core.rank_metrics.Share` and the percentiles ``Quantile`` (linear interpolation,
    numpy's default): over several ranks they reduce to those of every rank's responses together.

    Args:
        ratios: ``[B, T]`` token ratios ``w`` (not log-ratios).
        mask: ``[B, T]`` completion mask.
        epsilon: lower clip width ``ε_low`` (the paper's 0.2; TRL's ``epsilon``).
        epsilon_high: upper clip width (TRL's ``epsilon_high``); default ``epsilon``.
    """
    check_float("ratios", ratios, 2, "[B, T]")
    check_same_shape("mask", mask, "ratios", ratios)
    eps_hi = epsilon if epsilon_high is None else epsilon_high
    m = mask.bool()
    tok = ratios[m]
    nan_tok = torch.isnan(tok)
    tok_ok = tok[~nan_tok]
    # Compared in the ratios' own dtype, as TRL's clamp does: a float32 ratio of 1.2 is on the edge, not outside.
    outside = (tok_ok < 1 - epsilon) | (tok_ok > 1 + eps_hi)
    has_tokens = m.any(dim=1)
    any_gt10 = ((ratios > 10) & m).any(dim=1)[has_tokens]
    log_ratio = torch.where(m, torch.log(ratios.double()), torch.zeros_like(ratios, dtype=torch.float64))
    seq = torch.exp(log_ratio.sum(dim=1))[has_tokens]
    seq = seq[~torch.isnan(seq)]
    seq_cmp = seq.to(ratios.dtype)
    seq_outside = (seq_cmp < 1 - epsilon) | (seq_cmp > 1 + eps_hi)
    n_resp = int(has_tokens.sum())
    return {
        "token_ratio_p99": Quantile(tok_ok.double(), 0.99),
        "token_clip_rate": Share(outside.sum().item(), tok_ok.numel()),
        "resp_any_ratio_gt10": Share(any_gt10.sum().item(), n_resp),
        "seq_ratio_median": Quantile(seq, 0.5),
        "seq_ratio_p99": Quantile(seq, 0.99),
        "seq_clip_rate": Share(seq_outside.sum().item(), seq.numel()),
        "nan_token_frac": Share(nan_tok.sum().item(), tok.numel()),
    }


def normalised_ess(w_sum: float, w_sq_sum: float, units: float) -> float:
    """Kish's effective sample size over the number of units, ``(Σ w)² / (n Σ w²)`` in ``(0, 1]``: 1 when every
    weight is the same (on-policy samples), near ``1/n`` when one weight dominates; NaN without units."""
    if units <= 0 or w_sq_sum <= 0:
        return math.nan
    return (w_sum * w_sum) / (units * w_sq_sum)

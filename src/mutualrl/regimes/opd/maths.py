"""Mutual on-policy distillation across tokenizers (beyond the paper; GKD, arXiv 2306.13649; MiniLLM, 2306.08543).

The learner ``θ`` samples ``y ~ π_θ(· | x)``; a teaching peer ``T`` scores the same text. Per learner token ``t``:

    δ_t     = log π_T(y_t | x, y_<t) − log π_θ(y_t | x, y_<t)         (where the tokens match; per word else, below)
    A_{i,t} = c · A_i^GRPO + λ · Σ_j w_{p,j} · δ^j_t                  c = 1 (reward_term) or 0

With TRL's clipped surrogate at the snapshot (ratio 1) the gradient of the token is ``−A_{i,t} ∇ log π_θ(y_t)``, so
the λ part is ``λ Σ_t (log π_θ − log π_T)(y_t) ∇ log π_θ(y_t)``: the single-sample estimate of the gradient of the
per-token reverse KL ``Σ_t KL(π_θ(· | y_<t) ‖ π_T(· | y_<t))`` (GKD's on-policy student-generated objective with the
reverse KL; MiniLLM's single-step term), whose expectation over ``y`` is that gradient exactly
(``tests/test_regimes_opd.py`` enumerates a small vocabulary).

Across tokenizers the peer's trace is in its own tokens; THL moves it onto the learner's tokens unit by unit (a unit
is a word, or a CJK character). Where the peer's tokens of a unit are the learner's (same spans, one for one) each
token gets the peer's own log-prob of it, and ``δ_t`` is exact per token as above. Where the unit is split
differently (``" 12"``: learner ``" 1"`` ``"2"``, peer ``" 12"``), the peer has no probability of the learner's
single tokens, only of the unit: THL spreads ``log π_T(u)`` evenly over its tokens, and a per-token ``δ_t`` of that
spread is the gradient of no divergence (with a peer equal to the learner word for word, its expectation is not 0).
There every learner token of the unit carries the unit's whole log-ratio

    δ_t = log π_T(u | prefix) − log π_θ(u | prefix)     for each t ∈ u      (:func:`distillation_signal`, ``groups``)

so the λ part of the unit's gradient is ``λ (log π_θ(u) − log π_T(u)) Σ_{t∈u} ∇ log π_θ(y_t) = λ (log π_θ(u) −
log π_T(u)) ∇ log π_θ(u)``: the score-function estimate of the gradient of the unit's reverse KL ``KL(π_θ(u | ·) ‖
π_T(u | ·))``, 0 in expectation where the peer equals the learner on whole units whose tokens say where they end
(``tests/test_opd_word_units.py`` enumerates a word split 2-vs-1 through TRL's loss). Where the next token decides
a word's end (``" 1"`` and ``" 12"`` both words) a unit's log-prob is the mass of every word its tokens begin, a
different set for each tokenizer, and an equal peer's expected signal is not 0 (docs/regimes.md, "Where the next
token ends a word"; ``tests/test_word_units_enumerated.py``). A unit is the finest span both tokenizations can
compare; its estimator's variance grows with the unit's log-ratio, as a sequence-level one's does with the
sequence's. ``signal: sequence`` is exact there too, at a sequence-level estimator's variance: each token carries
the whole text's log-ratio ``log p_T(x) − log p_θ(x)``, each side's probability of the text summed over every
tokenization of it (:func:`~mutualrl.regimes.core.distillation.text_signal`), the estimate of the gradient of
``KL(p_θ ‖ p_T)`` over whole texts however the learner split them (``tests/test_opd_texts.py``). The adapter
multiplies each row's signal by :func:`~mutualrl.regimes.core.distillation.signal_row_scale` so that TRL's
reduction is a constant one under each loss type it accepts (``tests/test_opd_loss_types.py``).

The gate (``w``): per prompt group, a peer teaches where its verified success rate on its own K rollouts of the
prompt is above the learner's (``gate: competence``; NaN, nothing scored, teaches nothing), or always
(``gate: always``); with several teaching peers, the best (``teachers: best``) or their mean (``mean``). Where no
peer teaches, the token's advantage is GRPO's alone (``c · A_i``).
"""

from __future__ import annotations

from typing import Literal

import torch

# distillation_signal, success_rates, teaching_peers, teacher_weights: shared with opd-sgt and byte-kd
# (regimes/core/distillation.py), read here by OPD's adapter
from mutualrl.regimes.api import (Share, Total, distillation_signal, success_rates, teacher_weights,  # noqa: F401
                                  teaching_peers)


def opd_advantages(advantages: torch.Tensor, signal: torch.Tensor, mask: torch.Tensor, lam: float,
                   reward_term: bool) -> torch.Tensor:
    """Per-token advantages ``[B, T]`` (TRL's loss takes them as they are): ``c · A_i + λ · signal_{i,t}`` on the
    completion's tokens (``mask``), 0 elsewhere; ``c = 1`` with ``reward_term``, else 0."""
    if advantages.dim() != 1 or signal.shape != (advantages.shape[0], signal.shape[1]):
        raise ValueError(f"advantages must be [B] and signal [B, T]; got {tuple(advantages.shape)} and "
                         f"{tuple(signal.shape)}")
    base = advantages[:, None].to(torch.float32) if reward_term else torch.zeros_like(signal[:, :1])  # [B, 1]
    combined = base + lam * signal.to(torch.float32)  # [B, T]
    return torch.where(mask.bool(), combined, torch.zeros_like(combined)).to(advantages.dtype)


def row_weights(prompt_weights: torch.Tensor, k: int) -> torch.Tensor:
    """The prompt's teacher weights ``[P, M-1]`` on each of its K rows, ``[P·K, M-1]`` (TRL's prompt-major order)."""
    return prompt_weights.repeat_interleave(k, dim=0)


def opd_metrics(teaching: torch.Tensor, prompt_weights: torch.Tensor, matched: torch.Tensor, judged_rows: int,
                own_logps: torch.Tensor | None = None, peer_logps: torch.Tensor | None = None,
                valid: torch.Tensor | None = None, weights: torch.Tensor | None = None,
                lam: float = 0.0, signal: torch.Tensor | None = None) -> dict[str, float]:
    """The step's figures (``opd/<name>``): ``gate_rate`` (prompts with a teaching peer), ``judged_share`` (the
    learner's (rollout, peer) pairs whose judgement arrived and is of the learner's text), ``judged_rows`` (the peers'
    rollouts this policy judged), and where the signal was computed (``own_logps`` given): ``teacher_logp`` and
    ``reverse_kl`` (own − teacher log-prob, the per-token sample estimate of the reverse KL) per signalled token,
    ``signal_abs`` (mean ``|λ · signal|`` there, ``signal`` ``[B, T]`` as :func:`distillation_signal` gave the step)
    and ``signal_tokens``. Shares and totals: reduced over the ranks."""
    values: dict[str, float] = {
        "gate_rate": Share(float(teaching.any(-1).sum()), teaching.shape[0]),
        "judged_share": Share(float(matched.sum()), matched.numel()),
        "judged_rows": Total(judged_rows),
    }
    if own_logps is None:
        return values
    reached = valid & (weights[:, :, None] > 0)  # [B, M-1, T]
    tokens = reached.any(1)  # [B, T] tokens with a signal
    w = torch.where(reached, weights[:, :, None].expand_as(reached), torch.zeros(()))  # [B, M-1, T]
    norm = w.sum(1).clamp(min=1e-12)  # [B, T]
    teacher = torch.where(reached, peer_logps.double(), torch.zeros((), dtype=torch.float64))
    teacher = (w.double() * teacher).sum(1) / norm.double()  # [B, T] the teachers' weighted log-prob
    own = own_logps.double()
    count = float(tokens.sum())
    values["teacher_logp"] = Share(float(teacher[tokens].sum()), count)
    values["reverse_kl"] = Share(float((own - teacher)[tokens].sum()), count)
    values["signal_abs"] = Share(float((lam * signal.double()).abs()[tokens].sum()), count)
    values["signal_tokens"] = Total(count)
    return values


def source_use(own_logps: torch.Tensor | None, peer_logps: torch.Tensor | None, valid: torch.Tensor | None,
               weights: torch.Tensor, lam: float, names: list[str],
               groups: torch.Tensor | None = None, sequence: bool = False) -> dict[str, float]:
    """Per peer ``names[j]``: ``from/<peer>/used_share``, the share of the learner's rollouts of the step (``[B]``)
    whose per-token advantages peer ``j``'s judgement changed: it teaches the row's prompt (``weights[:, j] > 0``,
    its judgement matched), and with ``λ > 0`` its signal is nonzero on some token it reached. With ``λ = 0`` (or no
    signal computed: ``own_logps`` None) none is used. A ``Share`` (reduced over the ranks)."""
    rows = weights.shape[0]
    out: dict[str, float] = {}
    for j, name in enumerate(names):
        used = 0.0
        if lam != 0 and own_logps is not None:
            only = torch.zeros_like(weights)  # [B, M-1]
            only[:, j] = weights[:, j]
            signal = distillation_signal(own_logps.float(), peer_logps.float(), valid, only, groups,
                                         sequence=sequence)  # [B, T]
            used = float(((signal != 0) & valid[:, j]).any(dim=1).sum())
        out[f"from/{name}/used_share"] = Share(used, rows)
    return out

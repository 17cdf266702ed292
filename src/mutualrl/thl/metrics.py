"""THL diagnostics: per-unit mass, conservation errors, relative MAE, importance-ratio statistics.

Definitions follow the paper's App. "Sanity checks on THL word alignment" (Tab.
thl-wikitext) and App. "THL alignment diagnostics":

- per-word totals: the sum of a sequence's token values inside each unit (tokens that
  straddle units are apportioned by non-whitespace character overlap, as in alignment);
- Src->Aligned MAE / Max: |aligned - source| per unit, over units with a target slot
  (mass without one is the residual R_THL, reported separately);
- Aligned->Target MAE / Max: |aligned - target model| per unit;
- Prefix Leak Max: max over positions of |prefix sum of (aligned - source) unit differences|;
- relative MAE: mean |aligned - source| / mean |source| over evaluation units (words for
  Western text, characters for CJK: the unmerged ``auto`` partition);
- naive copy/truncate/pad baseline: source values copied to target positions by index;
- importance ratios ``exp(l_target - l_denominator)``: token p99, clip rate at epsilon,
  fraction of responses with any ratio > 10; sequence ratio = exp(mean token log-ratio).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mutualrl.thl.units import Partition


def word_mass(part: Partition, spans: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per-unit totals of ``values`` over the units of ``part`` (special ``(-1, -1)`` tokens ignored)."""
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    vals = np.asarray(values, dtype=np.float64).reshape(-1)
    out = np.zeros(part.n_units, dtype=np.float64)
    if part.n_units == 0 or len(spans) == 0:
        return out
    valid = spans[:, 0] >= 0
    spans, vals = spans[valid], vals[valid]
    first, last = part.unit_ranges(spans)
    single = first == last
    out += np.bincount(first[single], weights=vals[single], minlength=part.n_units)
    if not single.all():
        idx = np.nonzero(~single)[0]
        counts = last[idx] - first[idx] + 1
        rep = np.repeat(idx, counts)
        unit = np.repeat(first[idx], counts) + np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        u_start, u_end = part.unit_char_bounds()
        nb = part.nonws_before
        s, e = spans[rep, 0], spans[rep, 1]
        overlap = np.maximum(nb[np.minimum(e, u_end[unit])] - nb[np.maximum(s, u_start[unit])], 0)
        out += np.bincount(unit, weights=vals[rep] * overlap / (nb[e] - nb[s]), minlength=part.n_units)
    return out


def unit_slots(part: Partition, tgt_spans: np.ndarray) -> np.ndarray:
    """Whether each unit has at least one (non-special) target token."""
    spans = np.asarray(tgt_spans, dtype=np.int64).reshape(-1, 2)
    spans = spans[spans[:, 0] >= 0]
    has = np.zeros(part.n_units, dtype=bool)
    if len(spans) and part.n_units:
        first, last = part.unit_ranges(spans)
        for lo_hi in (first, last):
            has[lo_hi] = True
        # A token covering [first, last] gives every unit in between a slot too.
        depth = np.zeros(part.n_units + 1, dtype=np.int64)
        np.add.at(depth, first, 1)
        np.add.at(depth, last + 1, -1)
        has |= np.cumsum(depth)[: part.n_units] > 0
    return has


@dataclass
class ConservationStats:
    n_texts: int
    n_words: int  # units with a target slot, over all texts
    src_to_aligned_mae: float
    src_to_aligned_max: float
    prefix_leak_max: float
    residual_abs_max: float
    n_merged_units: int
    max_unit_chars: int
    aligned_to_target_mae: float | None = None
    aligned_to_target_max: float | None = None

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if v is not None}
        return out


def conservation_stats(
    aligned: object,
    src_spans: list[np.ndarray],
    src_logps: list[np.ndarray],
    tgt_spans: list[np.ndarray],
    tgt_logps: list[np.ndarray] | None = None,
) -> ConservationStats:
    """Tab. thl-wikitext's metrics over the (merged) units THL aligned on."""
    diffs: list[np.ndarray] = []
    tgt_diffs: list[np.ndarray] = []
    leak = 0.0
    for i, part in enumerate(aligned.partitions):  # type: ignore[attr-defined]
        slot = unit_slots(part, tgt_spans[i])
        src_w = word_mass(part, src_spans[i], src_logps[i])[slot]
        ali_w = word_mass(part, tgt_spans[i], aligned.values[i])[slot]  # type: ignore[attr-defined]
        d = ali_w - src_w
        diffs.append(np.abs(d))
        if len(d):
            leak = max(leak, float(np.abs(np.cumsum(d)).max()))
        if tgt_logps is not None:
            tgt_w = word_mass(part, tgt_spans[i], tgt_logps[i])[slot]
            tgt_diffs.append(np.abs(ali_w - tgt_w))
    all_d = np.concatenate(diffs) if diffs else np.zeros(0)
    stats = ConservationStats(
        n_texts=len(aligned.partitions),  # type: ignore[attr-defined]
        n_words=int(all_d.size),
        src_to_aligned_mae=float(all_d.mean()) if all_d.size else 0.0,
        src_to_aligned_max=float(all_d.max()) if all_d.size else 0.0,
        prefix_leak_max=leak,
        residual_abs_max=float(np.abs(aligned.residual).max()) if len(aligned.residual) else 0.0,  # type: ignore[attr-defined]
        n_merged_units=int(aligned.n_merged.sum()),  # type: ignore[attr-defined]
        max_unit_chars=int(aligned.max_unit_chars.max()) if len(aligned.max_unit_chars) else 0,  # type: ignore[attr-defined]
    )
    if tgt_logps is not None:
        all_t = np.concatenate(tgt_diffs) if tgt_diffs else np.zeros(0)
        stats.aligned_to_target_mae = float(all_t.mean()) if all_t.size else 0.0
        stats.aligned_to_target_max = float(all_t.max()) if all_t.size else 0.0
    return stats


def relative_mae(
    parts: list[Partition],
    src_spans: list[np.ndarray],
    src_logps: list[np.ndarray],
    tgt_spans: list[np.ndarray],
    tgt_values: list[np.ndarray],
) -> float:
    """Mean |target-grid mass - source mass| / mean |source mass| over the evaluation units ``parts``."""
    num, den = [], []
    for part, ss, sl, ts, tv in zip(parts, src_spans, src_logps, tgt_spans, tgt_values, strict=True):
        src_w = word_mass(part, ss, sl)
        num.append(np.abs(word_mass(part, ts, tv) - src_w))
        den.append(np.abs(src_w))
    n = np.concatenate(num) if num else np.zeros(0)
    d = np.concatenate(den) if den else np.zeros(0)
    return float(n.mean() / d.mean()) if d.size and d.mean() > 0 else 0.0


def naive_copy(src_logps: np.ndarray, n_target: int) -> np.ndarray:
    """The baseline: copy source values to target positions by index, truncate, pad with 0."""
    out = np.zeros(n_target, dtype=np.float32)
    k = min(n_target, len(src_logps))
    out[:k] = np.asarray(src_logps, dtype=np.float32)[:k]
    return out


def ratio_stats(numerators: list[np.ndarray], denominators: list[np.ndarray], eps: float = 0.2) -> dict:
    """Token- and sequence-level importance-ratio statistics (paper Tabs. thl-denominator-control, thl-seq-ratio)."""
    log_r = [np.asarray(n, dtype=np.float64) - np.asarray(d, dtype=np.float64) for n, d in zip(numerators, denominators, strict=True)]
    log_r = [r for r in log_r if r.size]
    if not log_r:
        return {"n_responses": 0}
    tok = np.exp(np.clip(np.concatenate(log_r), -50, 50))
    seq = np.exp(np.array([r.mean() for r in log_r]))
    return {
        "n_responses": len(log_r),
        "n_tokens": int(tok.size),
        "token_ratio_p99": float(np.percentile(tok, 99)),
        "token_clip_rate": float(np.mean(np.abs(tok - 1.0) > eps)),
        "resp_any_ratio_gt_10": float(np.mean([bool((np.exp(np.clip(r, -50, 50)) > 10).any()) for r in log_r])),
        "seq_ratio_median": float(np.median(seq)),
        "seq_ratio_p99": float(np.percentile(seq, 99)),
        "seq_clip_rate": float(np.mean(np.abs(seq - 1.0) > eps)),
    }

"""Policy-distribution alignment: source log-prob traces onto the learner's token grid.

Paper Sec. "Tokenizer Heterogeneity Layer" (operation (2)) and App. "Detailed Logits Word
Alignment" (Alg. WordAlignLogProbs): per word ``w``, ``Z_w = sum of source log-probs``,
spread evenly over the ``C_w`` target tokens of that word. The paper's reference maps
tokens to words by tokenizing every word segment on its own, which breaks its own
conservation claim for SentencePiece targets (a segment gets a dummy-prefix token the full
encoding does not have). Here the token->unit map comes from character spans, with the
unit partition of :mod:`.units`:

- a SOURCE token whose non-whitespace characters fall in several units is apportioned to
  them by its non-whitespace character overlap (paper App. "Detailed Logits Word
  Alignment": "apportions values by character overlap");
- a TARGET token covering several units merges them into one unit (no per-unit
  redistribution could conserve mass otherwise); merges are counted and reported;
- ``rule="exact-copy"`` (default): a unit whose source token spans equal its target token
  spans one for one gets the source values copied token by token (conserving and finer,
  so a self-pair is reproduced exactly); other units are spread as the paper does.
  ``rule="paper"`` spreads every unit.

Conservation (Theorem "THL conservation with a derived residual bound"): for each unit
with a target token, the aligned values sum to the unit's source mass; source mass with
no target slot (special tokens such as EOS, units beyond a truncated target) is returned
as the residual ``R_THL`` with its token count ``C_mis``, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mutualrl.errors import UsageError
from mutualrl.thl.units import Partition, partition

ALIGN_RULES = ("exact-copy", "paper")


@dataclass
class AlignedTraces:
    """The result of :func:`align_logprobs` for a batch (one entry per sequence)."""

    values: list[np.ndarray]  # float32 [m_i]: aligned log-probs on the target grid
    residual: np.ndarray  # float64 [B]: R_THL, source mass with no target slot
    residual_tokens: np.ndarray  # int64 [B]: C_mis, source tokens (partly) without a target slot
    residual_special: np.ndarray  # float64 [B]: the part of R_THL carried by special source tokens (EOS, ...)
    n_base_units: np.ndarray  # int64 [B]: units before merging
    n_units: np.ndarray  # int64 [B]: units after merging for target tokens that straddle units
    n_copied_units: np.ndarray  # int64 [B]: units filled by exact per-token copy
    max_unit_chars: np.ndarray  # int64 [B]: non-whitespace characters of the largest (merged) unit
    unit_mass: list[np.ndarray] = field(default_factory=list)  # float64 [U_i]: Z per unit
    target_units: list[np.ndarray] = field(default_factory=list)  # int64 [m_i]: unit of each target token (-1: special)
    partitions: list[Partition] = field(default_factory=list)

    @property
    def n_merged(self) -> np.ndarray:
        return self.n_base_units - self.n_units


def _stable_order(keys: np.ndarray) -> np.ndarray | None:
    """Stable sort order of ``keys``; None when they are already sorted (the usual case)."""
    if len(keys) < 2 or bool((keys[1:] >= keys[:-1]).all()):
        return None
    return np.argsort(keys, kind="stable")


def _check_spans(spans: np.ndarray, n_chars: int, what: str, ignore: np.ndarray | None = None) -> None:
    """Spans must lie in the text; ``(-1, -1)`` (special) passes, as do rows flagged in ``ignore``."""
    s, e = spans[:, 0], spans[:, 1]
    bad = (e < s) | (e > n_chars) | ((s < 0) & (e >= 0))
    if ignore is not None:
        bad &= ~ignore
    if bad.any():
        j = int(np.argmax(bad))
        raise UsageError(
            f"{what}: token {j} has span {tuple(int(x) for x in spans[j])}, outside the text of {n_chars} characters"
        )


def _as_spans(spans: object, what: str) -> np.ndarray:
    arr = np.asarray(spans)
    if arr.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if arr.dtype.kind not in "iu":
        arr = arr.astype(np.int64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise UsageError(f"{what}: spans must have shape [n, 2], got {list(arr.shape)}")
    return arr


def align_one(
    text: str,
    src_spans: np.ndarray,
    src_logps: np.ndarray,
    tgt_spans: np.ndarray,
    src_special: np.ndarray | None = None,
    *,
    src_mask: np.ndarray | None = None,
    units: str = "auto",
    rule: str = "exact-copy",
    ignore_value: float = 0.0,
    where: str = "sequence 0",
) -> dict:
    """Align one sequence (see :func:`align_logprobs`); returns a dict of per-sequence fields."""
    ss = _as_spans(src_spans, f"{where}: src_spans")
    ts = _as_spans(tgt_spans, f"{where}: tgt_spans")
    lp = np.asarray(src_logps, dtype=np.float64).reshape(-1)
    if len(lp) != len(ss):
        raise UsageError(f"{where}: {len(lp)} source log-probs but {len(ss)} source spans (they must agree)")
    if src_mask is not None:
        mask = np.asarray(src_mask).reshape(-1).astype(bool)
        if len(mask) != len(ss):
            raise UsageError(f"{where}: src_mask has {len(mask)} entries but the trace has {len(ss)} source tokens")
        ss, lp = ss[mask], lp[mask]
        if src_special is not None:
            src_special = np.asarray(src_special, dtype=bool).reshape(-1)
            if len(src_special) != len(mask):
                raise UsageError(f"{where}: src_special has {len(src_special)} entries but there are {len(mask)} "
                                 "source tokens")
            src_special = src_special[mask]
    if not np.isfinite(lp).all():
        j = int(np.argmin(np.isfinite(lp)))
        raise UsageError(f"{where}: source log-prob {j} is {lp[j]} (NaN/inf log-probs cannot be aligned)")
    special = (ss[:, 0] < 0) if src_special is None else np.asarray(src_special, dtype=bool).reshape(-1)
    if len(special) != len(ss):
        raise UsageError(f"{where}: src_special has {len(special)} entries but there are {len(ss)} source tokens")
    n_chars = len(text)
    _check_spans(ss, n_chars, f"{where}: src_spans", ignore=special if src_special is not None else None)
    _check_spans(ts, n_chars, f"{where}: tgt_spans")
    if ((ss[:, 0] < 0) & ~special).any():
        j = int(np.argmax((ss[:, 0] < 0) & ~special))
        raise UsageError(f"{where}: source token {j} has no span (-1, -1) but is not marked special")

    values = np.full(len(ts), ignore_value, dtype=np.float32)
    t_valid = ts[:, 0] >= 0
    target_units = np.full(len(ts), -1, dtype=np.int64)
    residual_special = float(lp[special].sum())
    out = dict(values=values, residual_special=residual_special, target_units=target_units, n_copied_units=0)
    if n_chars == 0:
        # Empty text: nothing to align onto; all source mass is residual.
        return out | dict(residual=float(lp.sum()), residual_tokens=len(lp), n_base_units=0, n_units=0,
                          max_unit_chars=0, unit_mass=np.zeros(0), partition=partition("", units))

    base = partition(text, units)
    all_t_valid = bool(t_valid.all())
    tv_spans = ts if all_t_valid else ts[t_valid]
    t_first, t_last = base.unit_ranges(tv_spans)
    part, new_id = base.merged(t_first, t_last)
    n_units = part.n_units
    t_unit = new_id[t_first]
    target_units[t_valid] = t_unit

    if special.any():
        s_spans, s_lp = ss[~special], lp[~special]
    else:
        s_spans, s_lp = ss, lp
    s_first, s_last = base.unit_ranges(s_spans)
    s_first, s_last = new_id[s_first], new_id[s_last]
    single = s_first == s_last
    all_single = bool(single.all())
    if all_single:
        s_unit, single_spans, single_lp = s_first, s_spans, s_lp
    else:
        s_unit, single_spans, single_lp = s_first[single], s_spans[single], s_lp[single]
    mass = np.bincount(s_unit, weights=single_lp, minlength=n_units).astype(np.float64)
    touched_by_split = np.zeros(n_units, dtype=bool)
    split_in_gap = np.zeros(0, dtype=bool)
    count_t = np.bincount(t_unit, minlength=n_units)
    if not all_single:
        # Straddling source tokens: apportion by non-whitespace character overlap with each unit.
        idx = np.nonzero(~single)[0]
        counts = s_last[idx] - s_first[idx] + 1
        rep = np.repeat(idx, counts)
        offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        unit = np.repeat(s_first[idx], counts) + offsets
        u_start, u_end = part.unit_char_bounds()
        nb = part.nonws_before
        s, e = s_spans[rep, 0], s_spans[rep, 1]
        overlap = nb[np.minimum(e, u_end[unit])] - nb[np.maximum(s, u_start[unit])]
        weight = np.maximum(overlap, 0) / (nb[e] - nb[s])
        mass += np.bincount(unit, weights=s_lp[rep] * weight, minlength=n_units)
        touched_by_split[unit] = True
        split_in_gap = np.bincount(rep, weights=(count_t[unit] == 0), minlength=len(s_lp))[idx] > 0

    has_slot = count_t > 0
    safe_count = np.maximum(count_t, 1)
    spread = (mass / safe_count)[t_unit]

    n_copied = 0
    if rule == "exact-copy" and len(t_unit):
        n_src = np.bincount(s_unit, minlength=n_units)
        candidate = (n_src == count_t) & has_slot & ~touched_by_split
        if candidate.any():
            # Rank of each target token within its unit, and where each unit's source tokens start
            # in unit order (spans are monotone in practice, so the sorts are usually skipped).
            order_t = _stable_order(t_unit)
            first_t = np.cumsum(count_t) - count_t
            if order_t is None:
                rank_t = np.arange(len(t_unit)) - first_t[t_unit]
            else:
                rank_t = np.empty(len(t_unit), dtype=np.int64)
                rank_t[order_t] = np.arange(len(t_unit)) - first_t[t_unit[order_t]]
            order_s = _stable_order(s_unit)
            first_s = np.cumsum(n_src) - n_src
            in_cand = candidate[t_unit]
            pos = np.where(in_cand, first_s[t_unit] + rank_t, 0)
            if len(s_unit):
                pos = np.minimum(pos, len(s_unit) - 1)
                match = pos if order_s is None else order_s[pos]
                same = (in_cand & (single_spans[match, 0] == tv_spans[:, 0])
                        & (single_spans[match, 1] == tv_spans[:, 1]))
            else:
                match, same = pos, np.zeros(len(t_unit), dtype=bool)
            bad = np.bincount(t_unit[in_cand & ~same], minlength=n_units) > 0
            copy_unit = candidate & ~bad
            copy_t = copy_unit[t_unit]
            if copy_t.any():
                spread[copy_t] = single_lp[match[copy_t]]
            n_copied = int(copy_unit.sum())
    elif rule not in ALIGN_RULES:
        raise UsageError(f"unknown THL alignment rule {rule!r}; expected one of {', '.join(ALIGN_RULES)}")
    if all_t_valid:
        values[:] = spread
    else:
        values[t_valid] = spread

    gap = ~has_slot
    residual = residual_special + float(mass[gap].sum())
    single_in_gap = int(gap[s_unit].sum())
    residual_tokens = int(special.sum()) + single_in_gap + int(split_in_gap.sum())
    u_start, u_end = part.unit_char_bounds()
    unit_nonws = part.nonws_before[u_end] - part.nonws_before[u_start]
    return out | dict(
        residual=residual,
        residual_tokens=residual_tokens,
        n_base_units=base.n_units,
        n_units=n_units,
        n_copied_units=n_copied,
        max_unit_chars=int(unit_nonws.max()) if n_units else 0,
        unit_mass=mass,
        partition=part,
    )


def align_logprobs(
    texts: Sequence[str],
    src_spans: Sequence[np.ndarray],
    src_logps: Sequence[np.ndarray],
    tgt_spans: Sequence[np.ndarray],
    *,
    src_special: Sequence[np.ndarray] | None = None,
    src_mask: Sequence[np.ndarray] | None = None,
    units: str = "auto",
    rule: str = "exact-copy",
    ignore_value: float = 0.0,
) -> AlignedTraces:
    """Project source per-token log-probs onto target tokens of the same texts.

    ``src_spans[i]``/``tgt_spans[i]`` are ``[n, 2]`` character spans into ``texts[i]``
    (from :func:`~mutualrl.thl.spans.decode_with_spans` and
    :func:`~mutualrl.thl.retokenize.retokenize`); ``(-1, -1)`` marks special tokens
    (source: excluded, their mass counted in the residual; target: left at ``ignore_value``).
    ``src_mask[i]`` (optional, one flag per source token) drops non-response positions
    (padding, prompt) before alignment; they are neither aligned nor residual.
    """
    if rule not in ALIGN_RULES:
        raise UsageError(f"unknown THL alignment rule {rule!r}; expected one of {', '.join(ALIGN_RULES)}")
    n = len(texts)
    for name, seq in (("src_spans", src_spans), ("src_logps", src_logps), ("tgt_spans", tgt_spans)):
        if len(seq) != n:
            raise UsageError(f"align_logprobs: {len(texts)} texts but {len(seq)} {name}")
    if src_special is not None and len(src_special) != n:
        raise UsageError(f"align_logprobs: {n} texts but {len(src_special)} src_special masks")
    if src_mask is not None and len(src_mask) != n:
        raise UsageError(f"align_logprobs: {n} texts but {len(src_mask)} src_mask rows")
    rows = [
        align_one(
            texts[i], src_spans[i], src_logps[i], tgt_spans[i],
            None if src_special is None else src_special[i],
            src_mask=None if src_mask is None else src_mask[i],
            units=units, rule=rule, ignore_value=ignore_value, where=f"sequence {i}",
        )
        for i in range(n)
    ]
    return AlignedTraces(
        values=[r["values"] for r in rows],
        residual=np.array([r["residual"] for r in rows], dtype=np.float64),
        residual_tokens=np.array([r["residual_tokens"] for r in rows], dtype=np.int64),
        residual_special=np.array([r["residual_special"] for r in rows], dtype=np.float64),
        n_base_units=np.array([r["n_base_units"] for r in rows], dtype=np.int64),
        n_units=np.array([r["n_units"] for r in rows], dtype=np.int64),
        n_copied_units=np.array([r["n_copied_units"] for r in rows], dtype=np.int64),
        max_unit_chars=np.array([r["max_unit_chars"] for r in rows], dtype=np.int64),
        unit_mass=[r["unit_mass"] for r in rows],
        target_units=[r["target_units"] for r in rows],
        partitions=[r["partition"] for r in rows],
    )

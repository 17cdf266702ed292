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

The whole batch is aligned at once over the concatenated texts (units never cross texts),
so there is no Python loop per word, per token, or even per sequence on the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mutualrl.errors import UsageError
from mutualrl.thl.units import BatchPartition, partition_batch

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
    partitions: BatchPartition | None = None  # the merged units (index it: partitions[i] is sequence i's)

    @property
    def n_merged(self) -> np.ndarray:
        return self.n_base_units - self.n_units


def _stable_order(keys: np.ndarray) -> np.ndarray | None:
    """Stable sort order of ``keys``; None when they are already sorted (the usual case)."""
    if len(keys) < 2 or bool((keys[1:] >= keys[:-1]).all()):
        return None
    return np.argsort(keys, kind="stable")


def _as_spans(spans: object, what: str) -> np.ndarray:
    arr = np.asarray(spans)
    if arr.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if arr.dtype.kind not in "iu":
        arr = arr.astype(np.int64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise UsageError(f"{what}: spans must have shape [n, 2], got {list(arr.shape)}")
    return arr


def _concat(arrays: list[np.ndarray], dtype: type, width: int | None = None) -> np.ndarray:
    if arrays:
        return np.concatenate(arrays).astype(dtype, copy=False)
    return np.zeros((0, width) if width else 0, dtype=dtype)


def _first_bad(bad: np.ndarray, offsets: np.ndarray) -> tuple[int, int]:
    """(sequence, index within it) of the first True in a flattened per-token mask."""
    j = int(np.argmax(bad))
    seq = int(np.searchsorted(offsets, j, side="right") - 1)
    return seq, j - int(offsets[seq])


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
    ``src_special[i]`` (optional) flags special source tokens explicitly.
    ``src_mask[i]`` (optional, one flag per source token) drops non-response positions
    (padding, prompt) before alignment; they are neither aligned nor residual.
    """
    if rule not in ALIGN_RULES:
        raise UsageError(f"unknown THL alignment rule {rule!r}; expected one of {', '.join(ALIGN_RULES)}")
    n_seq = len(texts)
    for name, seq in (("src_spans", src_spans), ("src_logps", src_logps), ("tgt_spans", tgt_spans)):
        if len(seq) != n_seq:
            raise UsageError(f"align_logprobs: {n_seq} texts but {len(seq)} {name}")
    if src_special is not None and len(src_special) != n_seq:
        raise UsageError(f"align_logprobs: {n_seq} texts but {len(src_special)} src_special masks")
    if src_mask is not None and len(src_mask) != n_seq:
        raise UsageError(f"align_logprobs: {n_seq} texts but {len(src_mask)} src_mask rows")

    # ---- per-sequence shape checks (O(1) each), then one flat batch --------------------------
    ss_list, lp_list, sp_list, ts_list = [], [], [], []
    for i in range(n_seq):
        where = f"sequence {i}"
        ss = _as_spans(src_spans[i], f"{where}: src_spans")
        lp = np.asarray(src_logps[i], dtype=np.float64).reshape(-1)
        if len(lp) != len(ss):
            raise UsageError(f"{where}: {len(lp)} source log-probs but {len(ss)} source spans (they must agree)")
        special = None
        if src_special is not None:
            special = np.asarray(src_special[i], dtype=bool).reshape(-1)
            if len(special) != len(ss):
                raise UsageError(f"{where}: src_special has {len(special)} entries but there are {len(ss)} source tokens")
        if src_mask is not None:
            mask = np.asarray(src_mask[i]).reshape(-1).astype(bool)
            if len(mask) != len(ss):
                raise UsageError(f"{where}: src_mask has {len(mask)} entries but the trace has {len(ss)} source tokens")
            ss, lp = ss[mask], lp[mask]
            special = special[mask] if special is not None else None
        ss_list.append(ss)
        lp_list.append(lp)
        sp_list.append(special if special is not None else ss[:, 0] < 0)
        ts_list.append(_as_spans(tgt_spans[i], f"{where}: tgt_spans"))

    text_len = np.fromiter((len(t) for t in texts), dtype=np.int64, count=n_seq)
    n_src = np.fromiter((len(x) for x in ss_list), dtype=np.int64, count=n_seq)
    n_tgt = np.fromiter((len(x) for x in ts_list), dtype=np.int64, count=n_seq)
    src_off = np.concatenate([[0], np.cumsum(n_src)])
    tgt_off = np.concatenate([[0], np.cumsum(n_tgt)])
    src_seq = np.repeat(np.arange(n_seq), n_src)
    tgt_seq = np.repeat(np.arange(n_seq), n_tgt)
    ss = _concat(ss_list, np.int64, 2)
    ts = _concat(ts_list, np.int64, 2)
    lp = _concat(lp_list, np.float64)
    special = _concat(sp_list, bool)

    # ---- validation over the flat batch (errors name the sequence and token) ------------------
    finite = np.isfinite(lp)
    if not finite.all():
        i, j = _first_bad(~finite, src_off)
        raise UsageError(f"sequence {i}: source log-prob {j} is {lp_list[i][j]} (NaN/inf log-probs cannot be aligned)")
    for what, spans, seq, off, ignore in (("src_spans", ss, src_seq, src_off, special if src_special is not None else None),
                                          ("tgt_spans", ts, tgt_seq, tgt_off, None)):
        s_, e_ = spans[:, 0], spans[:, 1]
        n_chars = text_len[seq]
        bad = (e_ < s_) | (e_ > n_chars) | ((s_ < 0) & (e_ >= 0))
        if ignore is not None:
            bad &= ~ignore
        if bad.any():
            i, j = _first_bad(bad, off)
            raise UsageError(f"sequence {i}: {what}: token {j} has span {tuple(int(x) for x in spans[off[i] + j])}, "
                             f"outside the text of {int(text_len[i])} characters")
    unmarked = (ss[:, 0] < 0) & ~special
    if unmarked.any():
        i, j = _first_bad(unmarked, src_off)
        raise UsageError(f"sequence {i}: source token {j} has no span (-1, -1) but is not marked special")

    # ---- units over the concatenated texts; spans shifted into it -----------------------------
    bp = partition_batch(list(texts), units)
    base = bp.whole
    char_off = bp.char_offsets
    residual_special = np.bincount(src_seq[special], weights=lp[special], minlength=n_seq)
    # Tokens of an empty text have nowhere to go: they join the residual like specials do.
    src_place = ~special & (text_len[src_seq] > 0)
    lost = ~special & ~src_place
    t_valid = (ts[:, 0] >= 0) & (text_len[tgt_seq] > 0)

    t_seq = tgt_seq[t_valid]
    tv_spans = ts[t_valid] + char_off[t_seq][:, None]
    t_owner = np.minimum(tv_spans[:, 0], char_off[t_seq + 1] - 1)
    t_first, t_last = base.unit_ranges(tv_spans, t_owner)
    part, new_id = base.merged(t_first, t_last)
    n_units = part.n_units
    t_unit = new_id[t_first]

    s_seq = src_seq[src_place]
    s_spans = ss[src_place] + char_off[s_seq][:, None]
    s_lp = lp[src_place]
    s_owner = np.minimum(s_spans[:, 0], char_off[s_seq + 1] - 1)
    s_first, s_last = base.unit_ranges(s_spans, s_owner)
    s_first, s_last = new_id[s_first], new_id[s_last]
    single = s_first == s_last
    all_single = bool(single.all())
    if all_single:
        s_unit, single_spans, single_lp, single_seq = s_first, s_spans, s_lp, s_seq
    else:
        s_unit, single_spans, single_lp, single_seq = s_first[single], s_spans[single], s_lp[single], s_seq[single]
    mass = np.bincount(s_unit, weights=single_lp, minlength=n_units).astype(np.float64)
    count_t = np.bincount(t_unit, minlength=n_units)
    touched_by_split = np.zeros(n_units, dtype=bool)
    split_gap_seq = np.zeros(0, dtype=np.int64)
    u_start, u_end = part.unit_char_bounds()
    if not all_single:
        # Straddling source tokens: apportion by non-whitespace character overlap with each unit.
        idx = np.nonzero(~single)[0]
        counts = s_last[idx] - s_first[idx] + 1
        rep = np.repeat(idx, counts)
        unit = np.repeat(s_first[idx], counts) + np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        nb = part.nonws_before
        s_, e_ = s_spans[rep, 0], s_spans[rep, 1]
        overlap = nb[np.minimum(e_, u_end[unit])] - nb[np.maximum(s_, u_start[unit])]
        weight = np.maximum(overlap, 0) / (nb[e_] - nb[s_])
        mass += np.bincount(unit, weights=s_lp[rep] * weight, minlength=n_units)
        touched_by_split[unit] = True
        in_gap = np.bincount(rep, weights=(count_t[unit] == 0), minlength=len(s_lp))[idx] > 0
        split_gap_seq = s_seq[idx[in_gap]]

    has_slot = count_t > 0
    spread = (mass / np.maximum(count_t, 1))[t_unit]

    copy_unit = np.zeros(n_units, dtype=bool)
    if rule == "exact-copy" and len(t_unit):
        n_single = np.bincount(s_unit, minlength=n_units)
        candidate = (n_single == count_t) & has_slot & ~touched_by_split
        if candidate.any():
            # The k-th target token of a unit meets the unit's k-th source token; the unit is
            # copied when every such pair has the same span (spans are monotone in practice,
            # so the sorts are usually skipped).
            order_t = _stable_order(t_unit)
            first_t = np.cumsum(count_t) - count_t
            if order_t is None:
                rank_t = np.arange(len(t_unit)) - first_t[t_unit]
            else:
                rank_t = np.empty(len(t_unit), dtype=np.int64)
                rank_t[order_t] = np.arange(len(t_unit)) - first_t[t_unit[order_t]]
            order_s = _stable_order(s_unit)
            first_s = np.cumsum(n_single) - n_single
            in_cand = candidate[t_unit]
            if len(s_unit):
                pos = np.minimum(np.where(in_cand, first_s[t_unit] + rank_t, 0), len(s_unit) - 1)
                match = pos if order_s is None else order_s[pos]
                same = (in_cand & (single_spans[match, 0] == tv_spans[:, 0])
                        & (single_spans[match, 1] == tv_spans[:, 1]))
                mismatch = np.bincount(t_unit[in_cand & ~same], minlength=n_units) > 0
                copy_unit = candidate & ~mismatch
                copy_t = copy_unit[t_unit]
                spread[copy_t] = single_lp[match[copy_t]]

    values_all = np.full(len(ts), ignore_value, dtype=np.float32)
    values_all[t_valid] = spread
    target_units_all = np.full(len(ts), -1, dtype=np.int64)

    # ---- per-sequence results ------------------------------------------------------------------
    unit_seq = np.searchsorted(char_off, u_start, side="right") - 1 if n_units else np.zeros(0, np.int64)
    units_per_seq = np.bincount(unit_seq, minlength=n_seq)
    unit_off = np.concatenate([[0], np.cumsum(units_per_seq)]).astype(np.int64)
    target_units_all[t_valid] = t_unit - unit_off[t_seq]
    gap = ~has_slot
    residual = residual_special + np.bincount(unit_seq[gap], weights=mass[gap], minlength=n_seq)
    residual += np.bincount(src_seq[lost], weights=lp[lost], minlength=n_seq)
    residual_tokens = (np.bincount(src_seq[special | lost], minlength=n_seq)
                       + np.bincount(single_seq[gap[s_unit]], minlength=n_seq)
                       + np.bincount(split_gap_seq, minlength=n_seq))
    unit_nonws = part.nonws_before[u_end] - part.nonws_before[u_start]
    max_unit_chars = np.zeros(n_seq, dtype=np.int64)
    np.maximum.at(max_unit_chars, unit_seq, unit_nonws)
    cut_t, cut_u = tgt_off[1:-1], unit_off[1:-1]
    return AlignedTraces(
        values=np.split(values_all, cut_t) if n_seq else [],
        residual=residual.astype(np.float64),
        residual_tokens=residual_tokens.astype(np.int64),
        residual_special=residual_special.astype(np.float64),
        n_base_units=np.diff(bp.unit_offsets),
        n_units=units_per_seq.astype(np.int64),
        n_copied_units=np.bincount(unit_seq[copy_unit], minlength=n_seq).astype(np.int64),
        max_unit_chars=max_unit_chars,
        unit_mass=np.split(mass, cut_u) if n_seq else [],
        target_units=np.split(target_units_all, cut_t) if n_seq else [],
        partitions=BatchPartition(whole=part, char_offsets=char_off, unit_offsets=unit_off),
    )

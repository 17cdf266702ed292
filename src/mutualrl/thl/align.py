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
so there is no Python loop per word or per token; the only loop per sequence checks and
flattens the inputs (a few numpy calls each).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mutualrl.errors import UsageError
from mutualrl.thl.units import BatchPartition, Partition, partition_batch

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
    target_copied: list[np.ndarray] = field(default_factory=list)  # bool [m_i]: its unit was copied token by token
    # int64 [m_i]: the unit of each target token as far as the source can tell units apart (-1: special): the units a
    # source token straddles joined, since only their total is the source's (its mass is apportioned by overlap)
    target_comparison_units: list[np.ndarray] = field(default_factory=list)
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


# Shape legend for the stages below: B sequences; n_src / n_tgt source / target tokens of the
# whole batch (flat); m target tokens with a slot (non-special, non-empty text); n_place source
# tokens placed in units (non-special, non-empty text), n_single of them inside one unit;
# U merged units of the batch.


@dataclass(frozen=True)
class _FlatBatch:
    """The checked batch as one flat token list per side (paper Sec. "Tokenizer Heterogeneity
    Layer": the whole batch is aligned at once; masked source positions already dropped)."""

    n_seq: int
    text_len: np.ndarray  # int64 [B]: characters of each text
    src_off: np.ndarray  # int64 [B + 1]: first flat source token of each sequence
    tgt_off: np.ndarray  # int64 [B + 1]: first flat target token of each sequence
    src_seq: np.ndarray  # int64 [n_src]: sequence of each source token
    tgt_seq: np.ndarray  # int64 [n_tgt]: sequence of each target token
    src_spans: np.ndarray  # int64 [n_src, 2]: source spans, per text
    tgt_spans: np.ndarray  # int64 [n_tgt, 2]: target spans, per text
    logps: np.ndarray  # float64 [n_src]: source log-probs
    special: np.ndarray  # bool [n_src]: special source tokens (given, or span (-1, -1))
    explicit_special: bool  # src_special was given: its tokens may have any span


@dataclass(frozen=True)
class _Placement:
    """Merged units and the source mass placed in them (paper App. "Detailed Logits Word
    Alignment": ``Z_w`` per unit ``w``, ``C_w`` target tokens per unit)."""

    batch: BatchPartition  # the base units (before merging) over the concatenated texts
    part: Partition  # the merged units
    lost: np.ndarray  # bool [n_src]: non-special source tokens of an empty text
    t_valid: np.ndarray  # bool [n_tgt]: target tokens with a slot
    t_seq: np.ndarray  # int64 [m]: their sequence
    t_spans: np.ndarray  # int64 [m, 2]: their spans in the concatenated text
    t_unit: np.ndarray  # int64 [m]: their merged unit
    s_unit: np.ndarray  # int64 [n_single]: merged unit of each single-unit source token
    s_spans: np.ndarray  # int64 [n_single, 2]: their spans in the concatenated text
    s_logps: np.ndarray  # float64 [n_single]: their log-probs
    s_seq: np.ndarray  # int64 [n_single]: their sequence
    mass: np.ndarray  # float64 [U]: Z_w
    count_t: np.ndarray  # int64 [U]: C_w
    touched_by_split: np.ndarray  # bool [U]: units a straddling source token reaches
    joined: np.ndarray  # int64 [U]: each unit's comparison unit (the units a straddling source token reaches, joined)
    split_gap_seq: np.ndarray  # int64 [k]: sequence of each straddling token reaching a unit without slot
    u_start: np.ndarray  # int64 [U]: first character of each unit
    u_end: np.ndarray  # int64 [U]: end character of each unit
    has_slot: np.ndarray  # bool [U]: units with a target token (C_w > 0)


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

    Stages: flat batch (:func:`_flat_batch`) -> validation (:func:`_validate`) -> units and
    mass (:func:`_place_mass`) -> spread or exact copy (:func:`_target_values`) -> per-sequence
    results (:func:`_results`).
    """
    if rule not in ALIGN_RULES:
        raise UsageError(f"unknown THL alignment rule {rule!r}; expected one of {', '.join(ALIGN_RULES)}")
    fb = _flat_batch(texts, src_spans, src_logps, tgt_spans, src_special, src_mask)
    _validate(fb)
    pl = _place_mass(fb, partition_batch(list(texts), units))
    spread, copy_unit = _target_values(pl, rule)
    return _results(fb, pl, spread, copy_unit, ignore_value)


def _flat_batch(
    texts: Sequence[str],
    src_spans: Sequence[np.ndarray],
    src_logps: Sequence[np.ndarray],
    tgt_spans: Sequence[np.ndarray],
    src_special: Sequence[np.ndarray] | None,
    src_mask: Sequence[np.ndarray] | None,
) -> _FlatBatch:
    """Stage 1: input counts and per-sequence shapes (O(1) checks each), then one flat batch
    (paper Sec. "Tokenizer Heterogeneity Layer", operation (2): the source traces to project)."""
    n_seq = len(texts)
    for name, seq in (("src_spans", src_spans), ("src_logps", src_logps), ("tgt_spans", tgt_spans)):
        if len(seq) != n_seq:
            raise UsageError(f"align_logprobs: {n_seq} texts but {len(seq)} {name}")
    if src_special is not None and len(src_special) != n_seq:
        raise UsageError(f"align_logprobs: {n_seq} texts but {len(src_special)} src_special masks")
    if src_mask is not None and len(src_mask) != n_seq:
        raise UsageError(f"align_logprobs: {n_seq} texts but {len(src_mask)} src_mask rows")

    ss_list, lp_list, sp_list, ts_list = [], [], [], []
    for i in range(n_seq):
        where = f"sequence {i}"
        ss = _as_spans(src_spans[i], f"{where}: src_spans")  # [n_i, 2]
        lp = np.asarray(src_logps[i], dtype=np.float64).reshape(-1)  # [n_i]
        if len(lp) != len(ss):
            raise UsageError(f"{where}: {len(lp)} source log-probs but {len(ss)} source spans (they must agree)")
        special = None
        if src_special is not None:
            special = np.asarray(src_special[i], dtype=bool).reshape(-1)  # [n_i]
            if len(special) != len(ss):
                raise UsageError(f"{where}: src_special has {len(special)} entries but there are {len(ss)} source tokens")
        if src_mask is not None:
            mask = np.asarray(src_mask[i]).reshape(-1).astype(bool)  # [n_i]
            if len(mask) != len(ss):
                raise UsageError(f"{where}: src_mask has {len(mask)} entries but the trace has {len(ss)} source tokens")
            ss, lp = ss[mask], lp[mask]  # [n_i', 2], [n_i']
            special = special[mask] if special is not None else None  # [n_i']
        ss_list.append(ss)
        lp_list.append(lp)
        sp_list.append(special if special is not None else ss[:, 0] < 0)
        ts_list.append(_as_spans(tgt_spans[i], f"{where}: tgt_spans"))

    n_src = np.fromiter((len(x) for x in ss_list), dtype=np.int64, count=n_seq)  # [B]
    n_tgt = np.fromiter((len(x) for x in ts_list), dtype=np.int64, count=n_seq)  # [B]
    return _FlatBatch(
        n_seq=n_seq,
        text_len=np.fromiter((len(t) for t in texts), dtype=np.int64, count=n_seq),  # [B]
        src_off=np.concatenate([[0], np.cumsum(n_src)]),  # [B + 1]
        tgt_off=np.concatenate([[0], np.cumsum(n_tgt)]),  # [B + 1]
        src_seq=np.repeat(np.arange(n_seq), n_src),  # [n_src]
        tgt_seq=np.repeat(np.arange(n_seq), n_tgt),  # [n_tgt]
        src_spans=_concat(ss_list, np.int64, 2),  # [n_src, 2]
        tgt_spans=_concat(ts_list, np.int64, 2),  # [n_tgt, 2]
        logps=_concat(lp_list, np.float64),  # [n_src]
        special=_concat(sp_list, bool),  # [n_src]
        explicit_special=src_special is not None,
    )


def _validate(fb: _FlatBatch) -> None:
    """Stage 2: validation over the flat batch; errors name the sequence and the token (paper Sec.
    "Tokenizer Heterogeneity Layer": finite log-probs, spans inside the shared text)."""
    finite = np.isfinite(fb.logps)  # [n_src]
    if not finite.all():
        i, j = _first_bad(~finite, fb.src_off)
        raise UsageError(f"sequence {i}: source log-prob {j} is {fb.logps[fb.src_off[i] + j]} "
                         "(NaN/inf log-probs cannot be aligned)")
    for what, spans, seq, off, ignore in (
        ("src_spans", fb.src_spans, fb.src_seq, fb.src_off, fb.special if fb.explicit_special else None),
        ("tgt_spans", fb.tgt_spans, fb.tgt_seq, fb.tgt_off, None),
    ):
        s_, e_ = spans[:, 0], spans[:, 1]  # [n], [n]
        n_chars = fb.text_len[seq]  # [n]
        bad = (e_ < s_) | (e_ > n_chars) | ((s_ < 0) & (e_ >= 0))  # [n]
        if ignore is not None:
            bad &= ~ignore
        if bad.any():
            i, j = _first_bad(bad, off)
            raise UsageError(f"sequence {i}: {what}: token {j} has span {tuple(int(x) for x in spans[off[i] + j])}, "
                             f"outside the text of {int(fb.text_len[i])} characters")
    unmarked = (fb.src_spans[:, 0] < 0) & ~fb.special  # [n_src]
    if unmarked.any():
        i, j = _first_bad(unmarked, fb.src_off)
        raise UsageError(f"sequence {i}: source token {j} has no span (-1, -1) but is not marked special")


def _place_mass(fb: _FlatBatch, bp: BatchPartition) -> _Placement:
    """Stage 3: units over the concatenated texts (spans shifted into it), merged where a target
    token straddles units; source mass ``Z_w`` per unit, a straddling source token apportioned
    by non-whitespace character overlap (App. "Detailed Logits Word Alignment")."""
    base, char_off = bp.whole, bp.char_offsets  # char_off: int64 [B + 1]
    # Tokens of an empty text have nowhere to go: they join the residual like specials do.
    src_place = ~fb.special & (fb.text_len[fb.src_seq] > 0)  # [n_src]
    lost = ~fb.special & ~src_place  # [n_src]
    t_valid = (fb.tgt_spans[:, 0] >= 0) & (fb.text_len[fb.tgt_seq] > 0)  # [n_tgt]

    t_seq = fb.tgt_seq[t_valid]  # [m]
    tv_spans = fb.tgt_spans[t_valid] + char_off[t_seq][:, None]  # [m, 2]
    t_owner = np.minimum(tv_spans[:, 0], char_off[t_seq + 1] - 1)  # [m]
    t_first, t_last = base.unit_ranges(tv_spans, t_owner)  # [m], [m]: base units
    part, new_id = base.merged(t_first, t_last)  # new_id: [U_base] -> merged unit
    n_units = part.n_units
    t_unit = new_id[t_first]  # [m]

    s_seq = fb.src_seq[src_place]  # [n_place]
    s_spans = fb.src_spans[src_place] + char_off[s_seq][:, None]  # [n_place, 2]
    s_lp = fb.logps[src_place]  # [n_place]
    s_owner = np.minimum(s_spans[:, 0], char_off[s_seq + 1] - 1)  # [n_place]
    s_first, s_last = base.unit_ranges(s_spans, s_owner)  # [n_place], [n_place]: base units
    s_first, s_last = new_id[s_first], new_id[s_last]  # [n_place], [n_place]: merged units
    single = s_first == s_last  # [n_place]
    all_single = bool(single.all())
    if all_single:
        s_unit, single_spans, single_lp, single_seq = s_first, s_spans, s_lp, s_seq
    else:
        s_unit, single_spans, single_lp, single_seq = s_first[single], s_spans[single], s_lp[single], s_seq[single]
    mass = np.bincount(s_unit, weights=single_lp, minlength=n_units).astype(np.float64)  # [U]
    count_t = np.bincount(t_unit, minlength=n_units)  # [U]
    touched_by_split = np.zeros(n_units, dtype=bool)  # [U]
    split_gap_seq = np.zeros(0, dtype=np.int64)  # [k]
    joined = np.arange(n_units, dtype=np.int64)  # [U]
    u_start, u_end = part.unit_char_bounds()  # [U], [U]
    if not all_single:
        split_mass, touched_by_split, split_gap_seq = _straddling_mass(
            part, u_start, u_end, count_t, np.nonzero(~single)[0], s_first, s_last, s_spans, s_lp, s_seq)
        mass += split_mass
        _, joined = part.merged(s_first[~single], s_last[~single])  # [U]
    return _Placement(batch=bp, part=part, lost=lost, t_valid=t_valid, t_seq=t_seq, t_spans=tv_spans, t_unit=t_unit,
                      s_unit=s_unit, s_spans=single_spans, s_logps=single_lp, s_seq=single_seq, mass=mass,
                      count_t=count_t, touched_by_split=touched_by_split, joined=joined, split_gap_seq=split_gap_seq,
                      u_start=u_start, u_end=u_end, has_slot=count_t > 0)


def _straddling_mass(
    part: Partition,
    u_start: np.ndarray,
    u_end: np.ndarray,
    count_t: np.ndarray,
    idx: np.ndarray,
    s_first: np.ndarray,
    s_last: np.ndarray,
    s_spans: np.ndarray,
    s_lp: np.ndarray,
    s_seq: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source tokens ``idx`` that straddle units, apportioned to each unit they reach by
    non-whitespace character overlap (App. "Detailed Logits Word Alignment": "apportions
    values by character overlap"). Returns the mass they add per unit, the units they reach
    and, per such token reaching a unit without a target slot, its sequence."""
    n_units = part.n_units
    counts = s_last[idx] - s_first[idx] + 1  # [k_src]: units each straddling token reaches
    rep = np.repeat(idx, counts)  # [k_pairs]: the token of each (token, unit) pair
    unit = (np.repeat(s_first[idx], counts) + np.arange(int(counts.sum()))
            - np.repeat(np.cumsum(counts) - counts, counts))  # [k_pairs]: the unit of each pair
    nb = part.nonws_before  # [n_chars + 1]
    s_, e_ = s_spans[rep, 0], s_spans[rep, 1]  # [k_pairs], [k_pairs]
    overlap = nb[np.minimum(e_, u_end[unit])] - nb[np.maximum(s_, u_start[unit])]  # [k_pairs]
    weight = np.maximum(overlap, 0) / (nb[e_] - nb[s_])  # [k_pairs]
    split_mass = np.bincount(unit, weights=s_lp[rep] * weight, minlength=n_units)  # [U]
    touched_by_split = np.zeros(n_units, dtype=bool)  # [U]
    touched_by_split[unit] = True
    in_gap = np.bincount(rep, weights=(count_t[unit] == 0), minlength=len(s_lp))[idx] > 0  # [k_src]
    return split_mass, touched_by_split, s_seq[idx[in_gap]]


def _target_values(pl: _Placement, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """Stage 4: each target token's value. The paper's rule (App. "Detailed Logits Word
    Alignment", Alg. WordAlignLogProbs) spreads ``Z_w`` evenly over the ``C_w`` target tokens
    of unit ``w``; ``rule="exact-copy"`` instead copies the source values token by token into a
    unit whose source spans equal its target spans one for one (so a self-pair is reproduced
    exactly). Returns the values ``[m]`` and the copied units ``[U]``."""
    n_units = pl.part.n_units
    spread = (pl.mass / np.maximum(pl.count_t, 1))[pl.t_unit]  # float64 [m]: Z_w / C_w
    copy_unit = np.zeros(n_units, dtype=bool)  # [U]
    if rule != "exact-copy" or not len(pl.t_unit):
        return spread, copy_unit
    n_single = np.bincount(pl.s_unit, minlength=n_units)  # [U]
    candidate = (n_single == pl.count_t) & pl.has_slot & ~pl.touched_by_split  # [U]
    if not candidate.any():
        return spread, copy_unit
    # The k-th target token of a unit meets the unit's k-th source token; the unit is copied
    # when every such pair has the same span (spans are monotone in practice, so the sorts
    # are usually skipped).
    t_unit, s_unit = pl.t_unit, pl.s_unit
    order_t = _stable_order(t_unit)  # [m] or None
    first_t = np.cumsum(pl.count_t) - pl.count_t  # [U]: first target token of each unit
    if order_t is None:
        rank_t = np.arange(len(t_unit)) - first_t[t_unit]  # [m]: rank within its unit
    else:
        rank_t = np.empty(len(t_unit), dtype=np.int64)  # [m]
        rank_t[order_t] = np.arange(len(t_unit)) - first_t[t_unit[order_t]]
    order_s = _stable_order(s_unit)  # [n_single] or None
    first_s = np.cumsum(n_single) - n_single  # [U]: first single source token of each unit
    in_cand = candidate[t_unit]  # [m]
    if len(s_unit):
        pos = np.minimum(np.where(in_cand, first_s[t_unit] + rank_t, 0), len(s_unit) - 1)  # [m]
        match = pos if order_s is None else order_s[pos]  # [m]: the source token each target token meets
        same = (in_cand & (pl.s_spans[match, 0] == pl.t_spans[:, 0])
                & (pl.s_spans[match, 1] == pl.t_spans[:, 1]))  # [m]
        mismatch = np.bincount(t_unit[in_cand & ~same], minlength=n_units) > 0  # [U]
        copy_unit = candidate & ~mismatch  # [U]
        copy_t = copy_unit[t_unit]  # [m]
        spread[copy_t] = pl.s_logps[match[copy_t]]
    return spread, copy_unit


def _results(fb: _FlatBatch, pl: _Placement, spread: np.ndarray, copy_unit: np.ndarray,
             ignore_value: float) -> AlignedTraces:
    """Stage 5: per-sequence results; the residual ``R_THL`` gathers the mass of special and
    lost source tokens and of units without a target slot (Theorem "THL conservation with a
    derived residual bound"), ``C_mis`` their token count."""
    n_seq, src_seq, lp, special, lost = fb.n_seq, fb.src_seq, fb.logps, fb.special, pl.lost
    char_off, part, mass, u_start, u_end = pl.batch.char_offsets, pl.part, pl.mass, pl.u_start, pl.u_end
    values_all = np.full(len(fb.tgt_spans), ignore_value, dtype=np.float32)  # [n_tgt]
    values_all[pl.t_valid] = spread
    target_units_all = np.full(len(fb.tgt_spans), -1, dtype=np.int64)  # [n_tgt]
    unit_seq = np.searchsorted(char_off, u_start, side="right") - 1 if part.n_units else np.zeros(0, np.int64)  # [U]
    units_per_seq = np.bincount(unit_seq, minlength=n_seq)  # [B]
    unit_off = np.concatenate([[0], np.cumsum(units_per_seq)]).astype(np.int64)  # [B + 1]
    target_units_all[pl.t_valid] = pl.t_unit - unit_off[pl.t_seq]
    target_copied_all = np.zeros(len(fb.tgt_spans), dtype=bool)  # [n_tgt]
    target_copied_all[pl.t_valid] = copy_unit[pl.t_unit]
    comparison_all = np.full(len(fb.tgt_spans), -1, dtype=np.int64)  # [n_tgt]
    comparison_all[pl.t_valid] = pl.joined[pl.t_unit] - pl.joined[unit_off[pl.t_seq]]  # numbered from each text's own
    gap = ~pl.has_slot  # [U]: units without a target slot
    residual_special = np.bincount(src_seq[special], weights=lp[special], minlength=n_seq)  # [B]
    residual = residual_special + np.bincount(unit_seq[gap], weights=mass[gap], minlength=n_seq)  # [B]
    residual += np.bincount(src_seq[lost], weights=lp[lost], minlength=n_seq)
    residual_tokens = (np.bincount(src_seq[special | lost], minlength=n_seq)
                       + np.bincount(pl.s_seq[gap[pl.s_unit]], minlength=n_seq)
                       + np.bincount(pl.split_gap_seq, minlength=n_seq))  # [B]
    unit_nonws = part.nonws_before[u_end] - part.nonws_before[u_start]  # [U]
    max_unit_chars = np.zeros(n_seq, dtype=np.int64)  # [B]
    np.maximum.at(max_unit_chars, unit_seq, unit_nonws)
    cut_t, cut_u = fb.tgt_off[1:-1], unit_off[1:-1]  # [B - 1], [B - 1]
    return AlignedTraces(
        values=np.split(values_all, cut_t) if n_seq else [],
        residual=residual.astype(np.float64),
        residual_tokens=residual_tokens.astype(np.int64),
        residual_special=residual_special.astype(np.float64),
        n_base_units=np.diff(pl.batch.unit_offsets),
        n_units=units_per_seq.astype(np.int64),
        n_copied_units=np.bincount(unit_seq[copy_unit], minlength=n_seq).astype(np.int64),
        max_unit_chars=max_unit_chars,
        unit_mass=np.split(mass, cut_u) if n_seq else [],
        target_units=np.split(target_units_all, cut_t) if n_seq else [],
        target_copied=np.split(target_copied_all, cut_t) if n_seq else [],
        target_comparison_units=np.split(comparison_all, cut_t) if n_seq else [],
        partitions=BatchPartition(whole=part, char_offsets=char_off, unit_offsets=unit_off),
    )

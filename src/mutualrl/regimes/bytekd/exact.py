"""byte-kd over exact next-byte distributions (``distribution: exact``): the teachers' distributions at every byte
offset of the learner's text onto TRL's batch, and the loss term over the learner's own exact distributions there.

Both sides sum over every tokenization covering the text so far (:mod:`~mutualrl.regimes.core.byte_covers`), so the
divergence is defined at every byte offset, inside a token of either model as at a shared boundary, and is 0 where a
peer gives every text the learner's probability. The KL at offset ``o`` sits on the learner token that writes the
byte after ``o`` (the text's end on its EOS) and is reduced as TRL reduces its per-token loss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from mutualrl.regimes.api import (CoverLimits, GRPOBatch, OwnTexts, Quantile, Share, StepRollouts, TrainerView,
                                  judgement_sources, learner_next_bytes_together, logits_width, offset_slots,
                                  own_texts, peer_row_views, peer_rows, token_pieces)
from mutualrl.regimes.bytekd.maths import symbol_kl

if TYPE_CHECKING:
    import pyarrow as pa


def empty_teacher_tensors(rows: int, judges: int, width: int, k: int) -> tuple[torch.Tensor, torch.Tensor,
                                                                              torch.Tensor, torch.Tensor]:
    """The judges' symbols before any judgement is read, all zero: ``ids`` int64 and ``logps`` float32
    ``[rows, judges, width, k]``, ``shared`` bool ``[rows, judges, width]``, ``matched`` bool ``[rows, judges]``."""
    ids = torch.zeros((rows, judges, width, k), dtype=torch.long)  # [B, J, W, k]
    logps = torch.zeros((rows, judges, width, k), dtype=torch.float32)  # [B, J, W, k]
    shared = torch.zeros((rows, judges, width), dtype=torch.bool)  # [B, J, W]
    matched = torch.zeros((rows, judges), dtype=torch.bool)  # [B, J]
    return ids, logps, shared, matched


def exact_teacher_distributions(own: OwnTexts, judgements: dict[str, pa.Table], judges: list[str],
                                rollouts: StepRollouts, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                         torch.Tensor]:
    """Each judge's exact next-byte symbols at every byte offset of this rank's own texts: ``ids`` int64 and
    ``logps`` float32 ``[B, J, O, k]``, ``shared`` bool ``[B, J, O]`` (the judge's text is the row's, byte for byte,
    with ``n + 1`` offsets of ``k``), ``matched`` bool ``[B, J]`` (a judgement of this row arrived)."""
    n, width = len(own.texts), max((len(text) + 1 for text in own.texts), default=1)
    ids, logps, shared, matched = empty_teacher_tensors(n, len(judges), width, k)
    pairs, sources = judgement_sources(judgements, judges, rollouts, n)
    their_texts = peer_rows(judgements, sources, ("response_text",))["response_text"]
    symbols = peer_row_views(judgements, sources, "next_byte_ids")
    masses = peer_row_views(judgements, sources, "next_byte_logps")
    for x, (i, j) in enumerate(pairs):
        text = their_texts[x]
        if text is None or text.encode("utf-8") != own.texts[i]:
            continue
        matched[i, j] = True
        offsets = len(own.texts[i]) + 1
        if symbols[x] is None or masses[x] is None or len(symbols[x]) != k * offsets or len(masses[x]) != k * offsets:
            continue
        ids[i, j, :offsets] = torch.from_numpy(symbols[x].astype(np.int64).reshape(offsets, k))  # [O_i, k]
        logps[i, j, :offsets] = torch.from_numpy(masses[x].astype(np.float32).reshape(offsets, k))  # [O_i, k]
        shared[i, j, :offsets] = True
    return ids, logps, shared, matched


def exact_kl_term(trainer: TrainerView, model: torch.nn.Module, inputs: GRPOBatch, prefix: str, lam: float,
                  limits: CoverLimits) -> tuple[torch.Tensor | None, dict[str, float]]:
    """``λ`` times the exact next-byte KL of this micro-batch's taught rows, each offset's KL on the token slot of
    :func:`~mutualrl.regimes.core.cover_scoring.offset_slots`, reduced as TRL reduces its per-token loss; and its
    figures. None where no row is taught (with several ranks, row 0 at weight 0)."""
    weights = inputs[f"{prefix}_weights"]  # [B, J, O]
    rows = torch.nonzero((weights > 0).flatten(1).any(1), as_tuple=True)[0].tolist()
    if not rows:
        if trainer.accelerator.num_processes == 1:
            return None, {}
        rows = [0]  # every rank runs the same forwards and backward: row 0 at weight 0 (an exact 0)
    mask = inputs["completion_mask"]  # [B, C]
    width = logits_width(model)
    pieces = token_pieces(trainer, width)
    own = own_texts(trainer, inputs["completion_ids"][rows], mask[rows], pieces)
    per_row, kl_sum, offsets, states, dropped = [], 0.0, 0, 0, 0.0
    learned, pad = learner_next_bytes_together(trainer, model, inputs["prompt_ids"][rows], inputs["prompt_mask"][rows],
                                          own.texts, own.tokens, pieces, limits)  # each [n + 1, 258], its covers
    for r, (row, (logq, covers)) in enumerate(zip(rows, learned, strict=True)):
        o = logq.shape[0]
        taught_ids = inputs[f"{prefix}_ids"][row:row + 1, :, :o]  # [1, J, n + 1, k]
        taught_logps = inputs[f"{prefix}_logps"][row:row + 1, :, :o]  # [1, J, n + 1, k]
        kl = symbol_kl(logq[None], taught_ids, taught_logps, weights[row:row + 1, :, :o])[0]  # [n + 1]
        slots = offset_slots(own.tokens[r], pieces, own.finished[r]).to(kl.device)  # [n + 1]
        per_row.append(torch.zeros(mask.shape[1], dtype=kl.dtype, device=kl.device).index_add(0, slots, kl))  # [C]
        taught = weights[row, :, :o].sum(0) > 0  # [n + 1]
        kl_sum += float(kl.detach()[taught].double().sum())
        offsets += int(taught.sum())
        states += len(covers.tokens)
        dropped = max(dropped, covers.dropped)
    per_token = torch.zeros(mask.shape, dtype=per_row[0].dtype, device=per_row[0].device).index_put(
        (torch.tensor(rows, device=per_row[0].device),), torch.stack(per_row))  # [B, C]
    loss = lam * trainer.aggregate_loss(per_token, mask, inputs)
    if pad is not None:  # another rank ran more gradient forwards: as many here, each an exact 0
        loss = loss + pad
    return loss, {"kl_term": loss.detach().item(), "byte_kl": Share(kl_sum, offsets),
                  "cover_states": Share(float(states), len(rows)), "cover_dropped": Quantile.largest(dropped)}

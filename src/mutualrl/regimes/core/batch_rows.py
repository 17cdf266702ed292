"""Batch surgery at the seam: rows appended to TRL's batch, and auxiliary sequences attached to its rows.

A data-level regime (PRP, HACPO) appends rows after the learner's own: :func:`append_rows` pads both to one width
and widens the learner's rows, :func:`learner_snapshot` scores the rows that lack the learner's log-probs,
:func:`extend_trl_extras` widens and extends TRL's optional per-row tensors (vLLM's sampling log-probs, its
importance-sampling ratio, the reference log-probs), and :func:`count_items` recounts ``num_items_in_batch``.
An outcome-level regime (SGT) keeps TRL's rows and attaches one sequence to some of them
(:func:`attach_sequences`), scored in its own forward. Each operation is one function here, so a regime composes
them and never reaches into TRL's batch layout itself. TRL shuffles and splits every tensor this writes with the
batch's other rows (one row per completion).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from mutualrl.errors import UsageError
from mutualrl.padding import pad_to_width, pad_token_rows
from mutualrl.regimes.core.trainer_interface import GRPOBatch, TrainerView

UNSUPPORTED_KEYS = ("tool_mask", "pixel_values", "image_grid_thw", "token_type_ids", "mm_token_type_ids")
"""TRL's keys of multimodal and tool rollouts: rows cannot be appended to a batch with any of them."""


def refuse_unsupported(output: GRPOBatch, regime: str) -> None:
    """A one-line error where TRL's batch holds multimodal or tool rollouts, to which no row can be appended."""
    for key in UNSUPPORTED_KEYS:
        if output.get(key) is not None:
            raise UsageError(f"regime {regime!r} does not support batches with {key!r} (multimodal/tool rollouts)")


@dataclass
class AppendedRows:
    """TRL's batch with ``N`` rows appended after its ``n_local`` own, every completion tensor ``width`` wide."""

    batch: GRPOBatch
    n_local: int
    width: int
    mask: torch.Tensor  # int [N, T] completion mask of the appended rows (all 0 on a row that adds no token)


def append_rows(output: GRPOBatch, completions: Sequence[Sequence[int]], prompt_rows: Sequence[int],
                advantages: Sequence[float], counted: torch.Tensor, pad_id: int) -> AppendedRows:
    """A copy of ``output`` with one row per ``completions`` entry after its own: the prompt tokens of own row
    ``prompt_rows[i]``, the completion right-padded, advantage ``advantages[i]``; the completion mask is 0 on a row
    whose ``counted`` (bool ``[N]``) is False, so it adds no token to the loss's normaliser but keeps its place."""
    device = output["completion_ids"].device
    width = max([output["completion_ids"].size(1)] + [len(ids) for ids in completions])
    completion, mask = pad_token_rows(completions, pad_id, min_width=width, device=device)  # [N, T] each
    mask = mask * counted[:, None].to(mask.dtype)  # [N, T]
    prompt_index = torch.tensor(prompt_rows, dtype=torch.long, device=device)  # [N]

    merged = output.copy()
    merged["prompt_ids"] = torch.cat([output["prompt_ids"], output["prompt_ids"][prompt_index]])  # [B+N, P]
    merged["prompt_mask"] = torch.cat([output["prompt_mask"], output["prompt_mask"][prompt_index]])  # [B+N, P]
    merged["completion_ids"] = torch.cat([pad_to_width(output["completion_ids"], width, pad_id), completion])
    merged["completion_mask"] = torch.cat([pad_to_width(output["completion_mask"], width, 0), mask])  # [B+N, T]
    merged["advantages"] = torch.cat([output["advantages"],
                                      torch.tensor(advantages, dtype=output["advantages"].dtype, device=device)])
    return AppendedRows(merged, output["completion_ids"].size(0), width, mask)


def learner_snapshot(trainer: TrainerView, output: GRPOBatch, rows: AppendedRows, needed: bool) -> torch.Tensor | None:
    """The learner's own log-probs ``[B+N, T]`` of every row of ``rows``, or None where TRL needs none.

    With generation and optimisation aligned TRL scores nothing and uses the detached current log-probs as the old
    ones, which *is* the learner's snapshot of every row, so a regime that does not read it (``needed`` False) keeps
    that (no extra scoring pass). Otherwise the rows that lack one are scored: the appended rows, and TRL's own too
    where TRL did not score them (PRP's "about one rollout's scoring")."""
    local_old = output.get("old_per_token_logps")
    if not needed and local_old is None and output.get("sampling_per_token_logps") is None:
        return None
    first = rows.n_local if local_old is not None else 0
    batch = rows.batch
    with torch.no_grad():
        scored = trainer.score_completions(trainer.model, batch["prompt_ids"][first:], batch["prompt_mask"][first:],
                                           batch["completion_ids"][first:], batch["completion_mask"][first:])
    return scored if local_old is None else torch.cat([pad_to_width(local_old, rows.width, 0.0), scored])


def reference_logps(trainer: TrainerView, rows: AppendedRows) -> torch.Tensor:
    """The reference model's log-probs ``[N, T]`` of the appended rows (TRL's KL term, ``beta > 0``)."""
    batch, appended = rows.batch, slice(rows.n_local, None)
    return trainer.score_reference(batch["prompt_ids"][appended], batch["prompt_mask"][appended],
                                   batch["completion_ids"][appended], batch["completion_mask"][appended])  # [N, T]


def extend_trl_extras(output: GRPOBatch, rows: AppendedRows, behaviour: torch.Tensor | None,
                      reference: Callable[[], torch.Tensor]) -> None:
    """TRL's optional per-row tensors of ``output`` widened and extended over the appended rows, into ``rows.batch``:
    vLLM's sampling log-probs (``behaviour``'s appended rows), its importance-sampling ratio (1: the appended rows
    were not sampled by this engine) and the reference log-probs (``reference()``, called only where TRL has them)."""
    merged, width, n_local = rows.batch, rows.width, rows.n_local
    n_appended = merged["completion_ids"].size(0) - n_local
    if output.get("sampling_per_token_logps") is not None:
        merged["sampling_per_token_logps"] = torch.cat(
            [pad_to_width(output["sampling_per_token_logps"], width, 0.0), behaviour[n_local:]])  # [B+N, T]
    if output.get("importance_sampling_ratio") is not None:
        ratio = output["importance_sampling_ratio"]  # [B, T] or [B, 1]
        columns = ratio.size(1) if ratio.size(1) == 1 else width
        ones = torch.ones((n_appended, columns), dtype=ratio.dtype, device=ratio.device)  # [N, T] or [N, 1]
        merged["importance_sampling_ratio"] = torch.cat(
            [ratio if ratio.size(1) == 1 else pad_to_width(ratio, width, 1.0), ones])
    if output.get("ref_per_token_logps") is not None:
        merged["ref_per_token_logps"] = torch.cat([pad_to_width(output["ref_per_token_logps"], width, 0.0),
                                                   reference()])  # [B+N, T]


def count_items(trainer: TrainerView, batch: GRPOBatch) -> None:
    """``num_items_in_batch``: the completion tokens of ``batch`` over every rank (TRL's loss normaliser)."""
    batch["num_items_in_batch"] = trainer.accelerator.gather(batch["completion_mask"].sum()).sum()


def attach_sequences(output: GRPOBatch, sequences: Sequence[Sequence[int]], pad_id: int, min_width: int,
                     prefix: str) -> None:
    """One auxiliary sequence per row of ``output`` (empty: none on that row), right-padded to at least
    ``min_width`` columns, as ``<prefix>_completion_ids`` and ``<prefix>_completion_mask`` ``[B, R]``."""
    completion, mask = pad_token_rows(sequences, pad_id, min_width=min_width,
                                      device=output["completion_ids"].device)  # [B, R] each
    output[f"{prefix}_completion_ids"] = completion
    output[f"{prefix}_completion_mask"] = mask


def attached_row_flags(batch: GRPOBatch) -> torch.Tensor | None:
    """bool ``[B]``: the rows whose attached sequence is scored (a positive ``<prefix>_weight`` beside a
    ``<prefix>_completion_mask``, :func:`attach_sequences`); None where the batch attaches none."""
    prefixes = [key.removesuffix("_completion_mask") for key in batch
                if key.endswith("_completion_mask") and key != "completion_mask"]
    flags = [batch[f"{prefix}_weight"] > 0 for prefix in prefixes
             if isinstance(batch.get(f"{prefix}_weight"), torch.Tensor)]  # [B] each
    return torch.stack(flags).any(0) if flags else None  # [B]


def attached_rows(inputs: GRPOBatch, prefix: str, num_processes: int) -> tuple[torch.Tensor, torch.Tensor,
                                                                                torch.Tensor] | None:
    """The rows of a micro-batch that carry an attached sequence (:func:`attach_sequences`) with a positive
    ``<prefix>_weight``: (their indices ``[R]``, their sequences and masks cut to the longest ``[R, T']``); None where
    the batch has no such key, or where no row carries one on a single process. With several ranks a rank without one
    still scores row 0 (at weight 0: no gradient), so that every rank runs the same forward and backward."""
    weights = inputs.get(f"{prefix}_weight")
    if weights is None:
        return None
    rows = torch.nonzero(weights > 0, as_tuple=True)[0]  # [R]
    if rows.numel() == 0:
        if num_processes == 1:
            return None
        rows = torch.zeros(1, dtype=torch.long, device=weights.device)  # [1]: keep ranks in lock-step
    mask = inputs[f"{prefix}_completion_mask"][rows]  # [R, T]
    width = max(1, int(mask.sum(dim=1).max().item()))
    return rows, inputs[f"{prefix}_completion_ids"][rows][:, :width], mask[:, :width]  # [R], [R, T'], [R, T']

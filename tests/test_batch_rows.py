"""The seam's batch surgery (regimes/core/batch_rows.py) on a hand-made TRL batch: rows appended after the own rows,
padded and widened; TRL's extras extended; an auxiliary sequence per row."""

from __future__ import annotations

import pytest
import torch

from mutualrl.errors import UsageError
from mutualrl.regimes.core.batch_rows import append_rows, attach_sequences, extend_trl_extras, refuse_unsupported

PAD = 0


def trl_batch() -> dict:
    """Two own rows, completions 2 wide (row 1 one token), prompts 2 wide."""
    return {"prompt_ids": torch.tensor([[5, 6], [7, 8]]), "prompt_mask": torch.ones(2, 2, dtype=torch.long),
            "completion_ids": torch.tensor([[1, 2], [3, PAD]]), "completion_mask": torch.tensor([[1, 1], [1, 0]]),
            "advantages": torch.tensor([0.5, -0.5])}


def test_appended_rows_take_their_prompt_row_and_widen_the_own_rows():
    rows = append_rows(trl_batch(), [[9, 9, 9], [4]], prompt_rows=[1, 0], advantages=[1.0, 2.0],
                       counted=torch.tensor([True, False]), pad_id=PAD)
    batch = rows.batch
    assert (rows.n_local, rows.width) == (2, 3)
    assert batch["completion_ids"].tolist() == [[1, 2, PAD], [3, PAD, PAD], [9, 9, 9], [4, PAD, PAD]]
    assert batch["completion_mask"].tolist() == [[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]]  # row 3 not counted
    assert rows.mask.tolist() == [[1, 1, 1], [0, 0, 0]]
    assert batch["prompt_ids"].tolist() == [[5, 6], [7, 8], [7, 8], [5, 6]]
    assert batch["advantages"].tolist() == [0.5, -0.5, 1.0, 2.0]


@pytest.mark.parametrize("sequence_level", [False, True])
def test_trls_extras_are_widened_and_extended_over_the_appended_rows(sequence_level):
    output = trl_batch()
    output["sampling_per_token_logps"] = torch.tensor([[-1.0, -2.0], [-3.0, 0.0]])  # [B, C]
    output["importance_sampling_ratio"] = torch.full((2, 1 if sequence_level else 2), 0.5)  # [B, 1] or [B, C]
    rows = append_rows(output, [[9, 9, 9]], prompt_rows=[0], advantages=[1.0], counted=torch.tensor([True]),
                       pad_id=PAD)
    behaviour = torch.full((3, 3), -7.0)  # [B+N, T]
    extend_trl_extras(output, rows, behaviour, reference=lambda: pytest.fail("TRL has no reference log-probs"))
    batch = rows.batch
    assert batch["sampling_per_token_logps"].tolist() == [[-1.0, -2.0, 0.0], [-3.0, 0.0, 0.0], [-7.0] * 3]
    expected = [[0.5], [0.5], [1.0]] if sequence_level else [[0.5, 0.5, 1.0], [0.5, 0.5, 1.0], [1.0] * 3]
    assert batch["importance_sampling_ratio"].tolist() == expected


def test_reference_log_probs_are_asked_for_only_where_trl_has_them():
    output = trl_batch()
    output["ref_per_token_logps"] = torch.tensor([[-1.0, -1.0], [-2.0, 0.0]])  # [B, C]
    rows = append_rows(output, [[9, 9, 9]], prompt_rows=[0], advantages=[1.0], counted=torch.tensor([True]),
                       pad_id=PAD)
    extend_trl_extras(output, rows, None, reference=lambda: torch.full((1, 3), -4.0))
    assert rows.batch["ref_per_token_logps"].tolist() == [[-1.0, -1.0, 0.0], [-2.0, 0.0, 0.0], [-4.0] * 3]


def test_an_auxiliary_sequence_per_row_and_a_batch_rows_cannot_join():
    output = trl_batch()
    attach_sequences(output, [[], [4, 5]], PAD, min_width=3, prefix="sgt")
    assert output["sgt_completion_ids"].tolist() == [[PAD] * 3, [4, 5, PAD]]
    assert output["sgt_completion_mask"].tolist() == [[0, 0, 0], [1, 1, 0]]
    output["pixel_values"] = torch.zeros(1)
    with pytest.raises(UsageError, match="regime 'prp' does not support batches with 'pixel_values'"):
        refuse_unsupported(output, "prp")

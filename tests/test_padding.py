"""pad_token_rows equals the hand-written padding loops it replaced (values, dtypes, widths)."""

from __future__ import annotations

import random

import pytest
import torch

from mutualrl.padding import pad_to_width, pad_token_rows


def loop_padding(rows, pad_id, side, min_width):
    width = max([min_width] + [len(r) for r in rows])
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            cols = slice(width - len(row), width) if side == "left" else slice(0, len(row))
            ids[i, cols] = torch.tensor(row, dtype=torch.long)
            mask[i, cols] = 1
    return ids, mask


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("min_width", [0, 1, 9])
def test_matches_the_loop(side, min_width):
    rng = random.Random(0)
    for _ in range(20):
        rows = [[rng.randrange(50_000) for _ in range(rng.randrange(7))] for _ in range(rng.randrange(1, 6))]
        ids, mask = pad_token_rows(rows, 3, side=side, min_width=min_width)
        want_ids, want_mask = loop_padding(rows, 3, side, min_width)
        assert ids.dtype == mask.dtype == torch.long
        assert torch.equal(ids, want_ids) and torch.equal(mask, want_mask)


def test_no_rows_and_empty_rows():
    ids, mask = pad_token_rows([], 0, min_width=4)
    assert ids.shape == mask.shape == (0, 4) and ids.dtype == torch.long
    ids, mask = pad_token_rows([[], []], 7)
    assert ids.shape == (2, 0)


def test_pad_to_width_keeps_dtype_and_values():
    logps = torch.tensor([[-1.5, -2.0]], dtype=torch.float64)
    assert torch.equal(pad_to_width(logps, 4, 0.0), torch.tensor([[-1.5, -2.0, 0.0, 0.0]], dtype=torch.float64))
    assert torch.equal(pad_to_width(logps, 3, 1.0, side="left"), torch.tensor([[1.0, -1.5, -2.0]], dtype=torch.float64))
    assert pad_to_width(logps, 2, 0.0) is logps

"""A regime's percentile over a policy's ranks holds every rank's values: PRP's token-ratio p99 of one paper step
(5120 peer rows of up to 3072 tokens per peer) reaches torch.quantile's limit of 2**24 values, which raised
"quantile() input tensor is too large" at the first step once the ranks' values were pooled."""

from __future__ import annotations

import math
import pickle

import pytest
import torch

from mutualrl.regimes.rank_metrics import Quantile, combine, parts


@pytest.mark.parametrize("q", [0.0, 0.25, 0.5, 0.99, 1.0])
def test_quantile_is_torch_quantile(q):
    values = torch.randn(1001, generator=torch.Generator().manual_seed(3), dtype=torch.float64)  # [1001]
    assert float(Quantile(values, q)) == pytest.approx(torch.quantile(values, q).item(), rel=1e-12, abs=1e-12)
    assert float(Quantile(values[:2], q)) == pytest.approx(torch.quantile(values[:2], q).item(), rel=1e-12)
    assert math.isnan(Quantile([], q)) and math.isnan(Quantile([1.0, float("nan")], q))


@pytest.mark.slow
def test_the_p99_of_two_ranks_holding_more_than_2_pow_24_values_together():
    """Failed before: combine pooled the ranks' values into one torch.quantile call, which refused them."""
    half = 2**23 + 1
    rank0 = parts({"token_ratio_p99": Quantile(torch.arange(half, dtype=torch.float64), 0.99)})  # [half]
    rank1 = parts({"token_ratio_p99": Quantile(torch.arange(half, 2 * half, dtype=torch.float64), 0.99)})  # [half]
    rank1 = pickle.loads(pickle.dumps(rank1))  # what gather_object hands over
    pooled = combine([rank0, rank1])["token_ratio_p99"]
    assert float(pooled) == pytest.approx(0.99 * (2 * half - 1))  # linear quantile of 0 .. 2*half - 1

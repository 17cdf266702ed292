"""A regime's percentile over a policy's ranks: PRP's token-ratio p99 of one paper step (5120 peer rows of up to
3072 tokens per peer) is millions of values per rank. Each rank sends a bounded sketch of them (exact for a few
values, within 0.5 % beyond), not the values (8 bytes each, sorted on every rank: seconds and tens of MB a step)."""

from __future__ import annotations

import math
import pickle

import pytest
import torch

from mutualrl.regimes.core.quantile_sketch import EXACT_VALUES, RELATIVE_ACCURACY
from mutualrl.regimes.core.rank_metrics import Quantile
from mutualrl.training.trl_metrics import combine, parts


@pytest.mark.parametrize("q", [0.0, 0.25, 0.5, 0.99, 1.0])
def test_quantile_is_torch_quantile(q):
    values = torch.randn(1001, generator=torch.Generator().manual_seed(3), dtype=torch.float64)  # [1001]
    assert float(Quantile(values, q)) == pytest.approx(torch.quantile(values, q).item(), rel=1e-12, abs=1e-12)
    assert float(Quantile(values[:2], q)) == pytest.approx(torch.quantile(values[:2], q).item(), rel=1e-12)
    assert math.isnan(Quantile([], q)) and math.isnan(Quantile([1.0, float("nan")], q))


@pytest.mark.slow
def test_the_p99_of_two_ranks_holding_more_than_2_pow_24_values_together():
    """Failed once: combine pooled the ranks' values into one torch.quantile call, which refused them."""
    half = 2**23 + 1
    rank0 = parts({"token_ratio_p99": Quantile(torch.arange(half, dtype=torch.float64), 0.99)})  # [half]
    rank1 = parts({"token_ratio_p99": Quantile(torch.arange(half, 2 * half, dtype=torch.float64), 0.99)})  # [half]
    rank1 = pickle.loads(pickle.dumps(rank1))  # what gather_object hands over
    pooled = combine([rank0, rank1])["token_ratio_p99"]
    assert float(pooled) == pytest.approx(0.99 * (2 * half - 1), rel=RELATIVE_ACCURACY)  # linear quantile of 0..2h-1


def heavy_tailed(n: int, seed: int) -> torch.Tensor:
    """Importance ratios as PRP sees them: exp of a wide normal, some exact zeros and negatives for the log-ratio
    metrics ``[n]``."""
    generator = torch.Generator().manual_seed(seed)
    ratios = torch.exp(2.0 * torch.randn(n, generator=generator, dtype=torch.float64))  # [n]
    ratios[: n // 100] = 0.0
    ratios[n // 100: n // 50] *= -1
    return ratios[torch.randperm(n, generator=generator)]


def test_what_a_rank_sends_is_bounded_whatever_its_values():
    """Failed before: a rank's parts held every value, 8 bytes each (4 MB for these 500 k ratios)."""
    sent = len(pickle.dumps(parts({"token_ratio_p99": Quantile(heavy_tailed(500_000, 1), 0.99)})))
    assert sent < 100_000


def test_sketched_quantiles_of_four_ranks_are_within_the_relative_accuracy():
    ranks = [heavy_tailed(12_000 + 100 * r, seed=r) for r in range(4)]  # [~12 k] each
    whole = torch.sort(torch.cat(ranks)).values  # [~48 k]: beyond the exact limit
    assert whole.numel() > EXACT_VALUES
    qs = (0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 1.0)
    sent = [pickle.loads(pickle.dumps(parts({q: Quantile(values, q) for q in qs}))) for values in ranks]
    pooled = combine(sent)
    for q in qs:
        position = q * (whole.numel() - 1)
        low, high = whole[int(position)].item(), whole[min(int(position) + 1, whole.numel() - 1)].item()
        near = [pytest.approx(v, rel=RELATIVE_ACCURACY, abs=1e-12) for v in (low, high)]
        assert float(pooled[q]) in near, (q, float(pooled[q]), low, high)
    assert (float(pooled[0.0]), float(pooled[1.0])) == (whole[0].item(), whole[-1].item())  # extremes stay exact


def test_few_values_stay_exact_over_ranks_and_a_nan_is_a_nan():
    a, b = torch.randn(100, dtype=torch.float64), torch.randn(EXACT_VALUES - 100, dtype=torch.float64)  # [100], [..]
    pooled = combine([parts({"p": Quantile(a, 0.99)}), parts({"p": Quantile(b, 0.99)})])["p"]
    assert float(pooled) == torch.quantile(torch.cat([a, b]), 0.99).item()
    with_nan = combine([parts({"p": Quantile(a, 0.5)}), parts({"p": Quantile([float("nan")], 0.5)})])["p"]
    assert math.isnan(with_nan)

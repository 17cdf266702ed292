"""Hypothesis strategies shared by the tests/test_regimes_*.py files: reward tensors with NaN."""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

NAN = math.nan

# Verifier-like values (binary, partial credit, exactly on the SGT thresholds) plus NaN = unscorable.
REWARD_VALUES = [0.0, 1.0, 0.5, 0.2, 0.8, 0.25, 0.9, 0.1, 2.0, -1.0, NAN]


def reward_value(allow_nan: bool = True, continuous: bool = True) -> st.SearchStrategy[float]:
    choices = st.sampled_from([v for v in REWARD_VALUES if allow_nan or not math.isnan(v)])
    if not continuous:
        return choices
    return st.one_of(choices, st.floats(min_value=-3.0, max_value=3.0, allow_nan=False, width=32))


@st.composite
def reward_tensor(draw, shape: tuple[int, ...], allow_nan: bool = True, continuous: bool = True) -> torch.Tensor:
    n = math.prod(shape)
    values = draw(st.lists(reward_value(allow_nan, continuous), min_size=n, max_size=n))
    return torch.tensor(values, dtype=torch.float32).reshape(shape)


@st.composite
def learner_rewards(draw, max_p: int = 6, max_k: int = 6, min_k: int = 1, **kw) -> torch.Tensor:
    p = draw(st.integers(1, max_p))
    k = draw(st.integers(min_k, max_k))
    return draw(reward_tensor((p, k), **kw))


@st.composite
def pool_rewards(draw, max_p: int = 5, max_m: int = 4, max_k: int = 5, min_m: int = 1, **kw) -> torch.Tensor:
    p = draw(st.integers(1, max_p))
    m = draw(st.integers(min_m, max_m))
    k = draw(st.integers(1, max_k))
    return draw(reward_tensor((p, m, k), **kw))


@st.composite
def binary_pool(draw, max_p: int = 6, max_m: int = 4, max_k: int = 5) -> torch.Tensor:
    p = draw(st.integers(1, max_p))
    m = draw(st.integers(2, max_m))
    k = draw(st.integers(1, max_k))
    bits = draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=p * m * k, max_size=p * m * k))
    return torch.tensor(bits).reshape(p, m, k)

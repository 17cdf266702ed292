"""GRPO + random baseline perturbation (App. "Ablation: shared normalization for XGRPO")."""

from __future__ import annotations

import math

import pytest
import torch
from _regimes_strategies import NAN, learner_rewards
from hypothesis import given, settings
from hypothesis import strategies as st

from mutualrl.regimes.core.grpo import group_advantages
from mutualrl.regimes.randpert.maths import randpert_advantages

EPS = 1e-4


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@settings(max_examples=100, deadline=None)
@given(rewards=learner_rewards(), scale=st.sampled_from(["group", "batch", "none"]), seed=st.integers(0, 100))
def test_scale_zero_is_grpo_bit_for_bit(rewards, scale, seed):
    ours = randpert_advantages(rewards, 0.0, gen(seed), scale)
    assert torch.equal(ours.view(torch.int32), group_advantages(rewards, scale).view(torch.int32))


def test_hand_example_group_scaling():
    # Prompt [1, 0]: mean 0.5, sample std sqrt(0.5). Prompt [3, 1]: mean 2, sample std sqrt(2).
    # Noise xi_p = scale * z_p with z ~ the first two randn draws of seed 7, scale 0.5:
    # A = (r - (mean + 0.5 z_p)) / (std + 1e-4).
    r = torch.tensor([[1.0, 0.0], [3.0, 1.0]])
    z = torch.randn(2, 1, generator=gen(7))
    a = randpert_advantages(r, 0.5, gen(7), "group")
    s0, s1 = math.sqrt(0.5) + EPS, math.sqrt(2) + EPS
    b0, b1 = 0.5 + 0.5 * z[0, 0].item(), 2 + 0.5 * z[1, 0].item()
    expected = torch.tensor([[(1 - b0) / s0, (0 - b0) / s0], [(3 - b1) / s1, (1 - b1) / s1]])
    torch.testing.assert_close(a, expected)


def test_none_scaling_shifts_every_row_of_a_prompt_by_the_same_noise():
    # "none": A = r - mean - xi_p, so A_pert - A_grpo = -xi_p on every row of prompt p.
    r = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.2, 0.4, 0.9]])
    diff = randpert_advantages(r, 0.3, gen(1), "none") - group_advantages(r, "none")
    z = torch.randn(3, 1, generator=gen(1))
    torch.testing.assert_close(diff, (-0.3 * z).expand(3, 3))


def test_std_is_grpo_std_not_perturbed():
    # Batch scaling: the divisor is the batch std of the raw rewards, whatever the noise.
    # Rewards 0, 2, 4, 6 -> sample std sqrt(20/3); the noise only moves the numerator.
    r = torch.tensor([[0.0, 2.0], [4.0, 6.0]])
    a = randpert_advantages(r, 1.0, gen(3), "batch")
    z = torch.randn(2, 1, generator=gen(3))
    s = math.sqrt(20 / 3) + EPS
    expected = (r - r.mean(dim=1, keepdim=True) - z) / s
    torch.testing.assert_close(a, expected)


def test_uniform_group_gets_noise_over_eps_under_the_literal_rule():
    # All rewards equal: std 0, so A = -xi / (0 + eps) -- the literal rule's consequence.
    r = torch.tensor([[1.0, 1.0, 1.0]])
    z = torch.randn(1, 1, generator=gen(5)).item()
    a = randpert_advantages(r, 0.1, gen(5), "group", skip_uniform_groups=False)
    torch.testing.assert_close(a, torch.full((1, 3), -0.1 * z / EPS))


def test_uniform_groups_are_left_unperturbed_by_default_under_group_scaling():
    # Row 0 is uniform -> zero advantages like GRPO; row 1 has spread -> perturbed (r - mean - xi)/std.
    r = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    z = torch.randn(2, 1, generator=gen(6))
    a = randpert_advantages(r, 0.1, gen(6), "group")
    assert a[0].tolist() == [0.0, 0.0, 0.0]
    std = r[1].std().item()  # sample std of (0, 1, 1) = sqrt(1/3)
    expected = (r[1] - r[1].mean() - 0.1 * z[1, 0]) / (std + EPS)
    torch.testing.assert_close(a[1], expected)


def test_noise_statistics_and_determinism():
    # Many prompts of [0, 1] under "none": A_pert - A_grpo = -xi_p, xi ~ N(0, 0.2^2).
    p = 20000
    r = torch.tensor([[0.0, 1.0]]).repeat(p, 1)
    xi = -(randpert_advantages(r, 0.2, gen(11), "none") - group_advantages(r, "none"))[:, 0]
    assert abs(xi.mean().item()) < 0.01  # standard error 0.2 / sqrt(20000) = 0.0014
    assert abs(xi.std().item() - 0.2) < 0.01
    assert torch.equal(randpert_advantages(r, 0.2, gen(11)), randpert_advantages(r, 0.2, gen(11)))
    assert not torch.equal(randpert_advantages(r, 0.2, gen(11)), randpert_advantages(r, 0.2, gen(12)))


def test_nan_rows_get_zero():
    r = torch.tensor([[1.0, NAN, 0.0], [NAN, NAN, NAN]])
    a = randpert_advantages(r, 0.5, gen(0), "group")
    assert a[0, 1].item() == 0.0 and a[1].tolist() == [0.0, 0.0, 0.0]


def test_bad_inputs():
    with pytest.raises(ValueError, match="scale must be >= 0"):
        randpert_advantages(torch.zeros(2, 2), -0.1, gen())
    with pytest.raises(ValueError, match=r"\[P, K\]"):
        randpert_advantages(torch.zeros(2, 2, 2), 0.1, gen())

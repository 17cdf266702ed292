"""XGRPO: the mixing rule by hand, switched-off identity with GRPO, diagnostics, shuffled-pool control."""

from __future__ import annotations

import math

import pytest
import torch
from _regimes_strategies import NAN, pool_rewards
from hypothesis import given, settings
from hypothesis import strategies as st

from mutualrl.regimes.core.grpo import group_advantages, prp_pooled_advantages
from mutualrl.regimes.core.reward_shapes import split_pool
from mutualrl.regimes.xgrpo.maths import XGRPOResult, pearson, xgrpo_advantages

EPS = 1e-4


def shuffled_pool_control(pool_rewards: torch.Tensor, learner_index: int, generator: torch.Generator,
                          lengths: torch.Tensor, *settings: object) -> XGRPOResult:
    """XGRPO with the peer reward bags permuted across prompts (App. "Pooled normalization vs. shuffled-pool
    control"): one permutation of the P prompts moves every peer's rewards; the learner's rewards and lengths stay."""
    perm = torch.randperm(pool_rewards.shape[0], generator=generator)  # [P]
    shuffled = pool_rewards.clone()  # [P, M, K]
    others = [m for m in range(pool_rewards.shape[1]) if m != learner_index]
    shuffled[:, others] = pool_rewards[perm][:, others]  # [P, M-1, K]
    return xgrpo_advantages(shuffled, learner_index, lengths, *settings)


def pool(learner: list[list[float]], peer: list[list[float]]) -> torch.Tensor:
    """A two-policy pool [P, 2, K], learner at index 0."""
    return torch.stack([torch.tensor(learner), torch.tensor(peer)], dim=1)


def test_hand_example_none_scaling_with_length_and_clip():
    # Learner [1, 0], peer [1, 1]; "none":
    #   A_loc  = [0.5, -0.5]                         (learner mean 0.5)
    #   A_pool = [1 - 0.75, 0 - 0.75] = [0.25, -0.75] (pool mean 3/4)
    #   A_mix  = 0.8 * A_loc + 0.2 * A_pool = [0.40 + 0.05, -0.40 - 0.15] = [0.45, -0.55]
    # Lengths 10, 30: mean 20, factors (20/10)^0.1 = 2^0.1 and (20/30)^0.1 = (2/3)^0.1
    #   A_len  = [0.45 * 2^0.1, -0.55 * (2/3)^0.1] = [0.48230, -0.52814]
    # Clip c = 0.5 -> [0.48230, -0.5]
    res = xgrpo_advantages(
        pool([[1.0, 0.0]], [[1.0, 1.0]]), 0, torch.tensor([[10, 30]]), 0.2, 0.1, 0.5, scale_rewards="none"
    )
    expected = torch.tensor([[0.45 * 2**0.1, -0.5]])
    torch.testing.assert_close(res.advantages, expected)
    assert 0.45 * 2**0.1 == pytest.approx(0.48230, abs=1e-5)
    torch.testing.assert_close(res.standalone_advantages, torch.tensor([[0.5, -0.5]]))
    torch.testing.assert_close(res.pooled_advantages, torch.tensor([[0.25, -0.75]]))
    assert res.clip_fraction == 0.5  # only the second rollout (|-0.528| > 0.5) was clipped


def test_hand_example_group_scaling():
    # Learner [1, 0]: mean 0.5, sample std sqrt(0.5) -> A_loc = +-0.5 / (sqrt(0.5) + eps).
    # Pool {1, 0, 1, 1}: mean 0.75, squared deviations 1/16 + 9/16 + 1/16 + 1/16 = 12/16,
    #   sample variance (12/16)/3 = 1/4, std 0.5 -> A_pool = [0.25, -0.75] / (0.5 + eps).
    # No length correction, no clip: A = 0.8 A_loc + 0.2 A_pool.
    res = xgrpo_advantages(
        pool([[1.0, 0.0]], [[1.0, 1.0]]), 0, torch.tensor([[5, 5]]), 0.2, 0.0, math.inf, scale_rewards="group"
    )
    loc = 0.5 / (math.sqrt(0.5) + EPS)
    pl = [0.25 / (0.5 + EPS), -0.75 / (0.5 + EPS)]
    expected = torch.tensor([[0.8 * loc + 0.2 * pl[0], -0.8 * loc + 0.2 * pl[1]]])
    torch.testing.assert_close(res.advantages, expected)


def test_batch_scaling_uses_batch_std_of_the_pool():
    # Two prompts, M = 2, K = 2, "batch": pooled std over all 8 rewards 0,1,1,1 | 0,0,0,1:
    #   values: four 1s and four 0s -> mean 0.5, squared deviations 8 * 0.25 = 2, /7 -> std sqrt(2/7).
    # Prompt 0 pool mean 3/4: learner [0, 1] -> A_pool = [-0.75, 0.25] / (sqrt(2/7) + eps).
    p = pool([[0.0, 1.0], [0.0, 0.0]], [[1.0, 1.0], [0.0, 1.0]])
    res = xgrpo_advantages(p, 0, torch.ones(2, 2), 1.0, 0.0, math.inf, scale_rewards="batch")
    s = math.sqrt(2 / 7) + EPS
    torch.testing.assert_close(res.advantages[0], torch.tensor([-0.75 / s, 0.25 / s]))
    # Prompt 1: pool {0, 0, 0, 1}, mean 1/4: learner [0, 0] -> [-0.25, -0.25] / s.
    torch.testing.assert_close(res.advantages[1], torch.tensor([-0.25 / s, -0.25 / s]))


def test_learner_index_selects_the_learner():
    # Same pool, learner = policy 1 ([1, 1]): A_loc = [0, 0]; pool mean 0.75 ("none") -> A_pool = [0.25, 0.25].
    res = xgrpo_advantages(pool([[1.0, 0.0]], [[1.0, 1.0]]), 1, torch.ones(1, 2), 0.2, 0.0, math.inf, "none")
    torch.testing.assert_close(res.advantages, torch.tensor([[0.05, 0.05]]))


def test_length_factor_shrinks_long_and_keeps_signs():
    # A_mix = A_loc when alpha = 0; lengths 1, 3 (mean 2): factors 2^0.5 and (2/3)^0.5.
    # Zero-length responses count as 1 token.
    p = pool([[1.0, 0.0, 1.0]], [[0.0, 0.0, 0.0]])
    res = xgrpo_advantages(p, 0, torch.tensor([[1, 3, 0]]), 0.0, 0.5, math.inf, "none")
    # A_loc = [1/3, -2/3, 1/3]; lengths clamped [1, 3, 1], mean 5/3.
    f = [(5 / 3) ** 0.5, (5 / 9) ** 0.5, (5 / 3) ** 0.5]
    torch.testing.assert_close(res.advantages, torch.tensor([[f[0] / 3, -2 * f[1] / 3, f[2] / 3]]))
    assert torch.equal(torch.sign(res.advantages), torch.sign(res.standalone_advantages))


@settings(max_examples=150, deadline=None)
@given(data=st.data(), scale=st.sampled_from(["group", "batch", "none"]))
def test_switched_off_equals_grpo_bit_for_bit(data, scale):
    rewards = data.draw(pool_rewards())
    p, m, k = rewards.shape
    n = data.draw(st.integers(0, m - 1))
    lengths = torch.tensor(data.draw(st.lists(st.integers(0, 50), min_size=p * k, max_size=p * k))).reshape(p, k)
    res = xgrpo_advantages(rewards, n, lengths, 0.0, 0.0, math.inf, scale_rewards=scale)
    expected = group_advantages(rewards[:, n].contiguous(), scale)
    assert torch.equal(res.advantages.view(torch.int32), expected.view(torch.int32))
    assert res.mean_abs_change == 0.0 or math.isnan(res.mean_abs_change)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), scale=st.sampled_from(["group", "batch", "none"]))
def test_pool_of_one_pooled_equals_local(data, scale):
    # M = 1: the "pool" is the learner's own group, so A_pool = A_loc exactly and mixing changes nothing.
    rewards = data.draw(pool_rewards(max_m=1))
    p, _, k = rewards.shape
    res = xgrpo_advantages(rewards, 0, torch.ones(p, k), 0.2, 0.0, math.inf, scale_rewards=scale)
    assert torch.equal(res.pooled_advantages, res.standalone_advantages)
    torch.testing.assert_close(res.advantages, res.standalone_advantages, rtol=1e-6, atol=1e-6)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_clip_bounds_and_nan_rows(data):
    rewards = data.draw(pool_rewards(min_m=2))
    p, m, k = rewards.shape
    c = data.draw(st.sampled_from([0.5, 1.0, 5.0]))
    res = xgrpo_advantages(rewards, 0, torch.full((p, k), 7), 0.2, 0.1, c)
    assert bool((res.advantages.abs() <= c).all())
    assert bool((res.advantages[torch.isnan(rewards[:, 0])] == 0).all())
    assert not bool(torch.isnan(res.advantages).any())


def test_diagnostics_by_hand():
    # "none", alpha 0.2, no length correction, no clip.
    # Prompt 0: learner [1, 0], peer [1, 1]: A_loc [.5, -.5], A_pool [.25, -.75], A [.45, -.55],
    #           change [.05, .05], signs unchanged; peer spread std{1, 1} = 0.
    # Prompt 1: learner [0, 0], peer [1, 0]: A_loc [0, 0], pool mean .25, A_pool [-.25, -.25],
    #           A [-.05, -.05], change .05 each, signs 0 -> - (flip); peer spread std{1, 0} = sqrt(.5).
    # Prompt 2: learner [1, 1], peer [0, 0]: A_loc [0, 0], pool mean .5, A_pool [.5, .5],
    #           A [.1, .1], change .1 each, signs 0 -> + (flip); spread 0.
    # mean |change| = (4 * .05 + 2 * .1) / 6 = 1/15; prompt flip rate 2/3; rollout flip rate 4/6.
    # Correlation of spread [0, a, 0] with per-prompt change [.05, .05, .1]:
    #   centred x = a/3 [-1, 2, -1], centred y = .05/3 [-1, -1, 2]
    #   sum xy = a .05/9 (1 - 2 - 2) = -3 a .05/9; sum x^2 = 6 a^2/9; sum y^2 = 6 (.05)^2/9
    #   corr = -3 / 6 = -0.5
    p = pool([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]], [[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    res = xgrpo_advantages(p, 0, torch.ones(3, 2), 0.2, 0.0, math.inf, "none")
    torch.testing.assert_close(res.advantages, torch.tensor([[0.45, -0.55], [-0.05, -0.05], [0.1, 0.1]]))
    assert res.mean_abs_change == pytest.approx(1 / 15)
    assert res.sign_flip_rate == pytest.approx(2 / 3)
    assert res.rollout_sign_flip_rate == pytest.approx(4 / 6)
    assert res.spread_change_corr == pytest.approx(-0.5)
    assert res.clip_fraction == 0.0
    assert set(res.metrics()) == {
        "mean_abs_adv_change",
        "sign_flip_rate",
        "rollout_sign_flip_rate",
        "spread_change_corr",
        "clip_fraction",
        "adv_abs_mean",
        "adv_std",
    }
    # The advantage scale: |A| = [.45, .55, .05, .05, .1, .1] -> mean 1.3/6; std of the signed values.
    assert res.adv_abs_mean == pytest.approx(1.3 / 6)
    assert res.adv_std == pytest.approx(torch.tensor([0.45, -0.55, -0.05, -0.05, 0.1, 0.1]).std().item())


def test_diagnostics_ignore_unscored_rollouts():
    # Learner [1, NaN], peer [1, 0] ("none"): learner stats over {1}: A_loc = [0, 0].
    # Pool {1, 1, 0} mean 2/3: A_pool row 0 = 1/3, NaN row -> 0. A = 0.2 * [1/3, 0].
    # Only the scored rollout counts: mean change = 1/15, flip 0 -> + on it: rates 1 and 1.
    res = xgrpo_advantages(pool([[1.0, NAN]], [[1.0, 0.0]]), 0, torch.ones(1, 2), 0.2, 0.0, math.inf, "none")
    torch.testing.assert_close(res.advantages, torch.tensor([[1 / 15, 0.0]]))
    assert res.mean_abs_change == pytest.approx(1 / 15)
    assert res.rollout_sign_flip_rate == 1.0 and res.sign_flip_rate == 1.0
    assert math.isnan(res.spread_change_corr)  # a single prompt has no correlation


def test_pearson_by_hand():
    # y = 2x + 1 -> 1; y = -x -> -1; constant y -> undefined; NaN pairs dropped.
    x = torch.tensor([0.0, 1.0, 2.0, NAN])
    assert pearson(x, 2 * x + 1) == pytest.approx(1.0)
    assert pearson(x, -x) == pytest.approx(-1.0)
    assert math.isnan(pearson(x, torch.ones(4)))


def test_true_pool_tracks_peer_structure_more_than_shuffled():
    # Peers succeed exactly where the learner fails (complementary pool): the true pool moves the
    # learner's advantages on exactly those prompts, the shuffled pool on others too.
    # Learner fails (all 0) on prompts 0-2 where the peer is perfect; succeeds (all 1) on 3-5 where
    # the peer fails. True pool: every prompt changes. Sign flips are the same 0 -> +-, but the
    # shuffled pool pairs a failing learner with a failing peer on some prompts (no change).
    learner = [[0.0, 0.0]] * 3 + [[1.0, 1.0]] * 3
    peer = [[1.0, 1.0]] * 3 + [[0.0, 0.0]] * 3
    p = pool(learner, peer)
    true = xgrpo_advantages(p, 0, torch.ones(6, 2), 0.2, 0.0, math.inf, "none")
    assert true.sign_flip_rate == 1.0
    # Fixed seed whose permutation is not the identity on the two halves.
    shuf = shuffled_pool_control(p, 0, torch.Generator().manual_seed(0), torch.ones(6, 2), 0.2, 0.0, math.inf, "none")
    assert shuf.sign_flip_rate < 1.0


def test_bad_inputs():
    rewards = torch.zeros(2, 2, 3)
    with pytest.raises(ValueError, match="learner_index must be in"):
        xgrpo_advantages(rewards, 2, torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"lengths must have the learner shape \[P, K\] = \(2, 3\)"):
        xgrpo_advantages(rewards, 0, torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"pool_rewards must have shape \[P, M, K\]"):
        xgrpo_advantages(torch.zeros(2, 3), 0, torch.ones(2, 3))
    with pytest.raises(ValueError, match="cross_model_factor"):
        xgrpo_advantages(rewards, 0, torch.ones(2, 3), cross_model_factor=1.5)
    with pytest.raises(ValueError, match="advantage_clip"):
        xgrpo_advantages(rewards, 0, torch.ones(2, 3), advantage_clip=0.0)


def test_pooled_part_is_prp_pooled_slice():
    g = torch.Generator().manual_seed(1)
    rewards = torch.rand(4, 3, 5, generator=g)
    res = xgrpo_advantages(rewards, 2, torch.ones(4, 5))
    assert torch.equal(res.pooled_advantages, prp_pooled_advantages(rewards)[:, 2])


# ---------------------------------------------------------------------------------------
# Normalisation: pooled (paper) vs per-policy (Dr. MAS)
# ---------------------------------------------------------------------------------------


def test_per_policy_normalisation_by_hand_batch_scaling():
    # Learner [[1, 0], [0, 0]], peer [[1, 1], [1, 1]]; scale_rewards "batch", eps 0; α = 1, γ = 0, c = ∞
    # so A_eff = A_pool.
    # Pooled baselines: prompt 0 {1, 0, 1, 1} -> 0.75; prompt 1 {0, 0, 1, 1} -> 0.5.
    # per-policy scale: sample std of the learner's {1, 0, 0, 0}: mean .25, var (.5625 + 3 * .0625) / 3 = .25 -> 0.5
    #   A = [[(1 - .75)/.5, (0 - .75)/.5], [(0 - .5)/.5, (0 - .5)/.5]] = [[.5, -1.5], [-1, -1]]
    # pooled scale: sample std of all 8 rewards {1 x5, 0 x3}: mean .625,
    #   var (5 * .140625 + 3 * .390625) / 7 = 1.875 / 7 -> std 0.517549
    p = pool([[1.0, 0.0], [0.0, 0.0]], [[1.0, 1.0], [1.0, 1.0]])
    lengths = torch.ones(2, 2)
    per_policy = xgrpo_advantages(p, 0, lengths, 1.0, 0.0, math.inf, "batch", eps=0.0, normalisation="per-policy")
    torch.testing.assert_close(per_policy.advantages, torch.tensor([[0.5, -1.5], [-1.0, -1.0]]))
    pooled = xgrpo_advantages(p, 0, lengths, 1.0, 0.0, math.inf, "batch", eps=0.0, normalisation="pooled")
    s = math.sqrt(1.875 / 7)
    assert s == pytest.approx(0.517549, abs=1e-6)
    torch.testing.assert_close(pooled.advantages, torch.tensor([[0.25 / s, -0.75 / s], [-0.5 / s, -0.5 / s]]))
    # The peer's own advantages under per-policy use its own scale: its rewards are all 1 (std 0), so
    # with eps 1e-4: (1 - .75)/1e-4 = 2500 and (1 - .5)/1e-4 = 5000, then clipped at c = 5.
    peer = xgrpo_advantages(p, 1, lengths, 1.0, 0.0, 5.0, "batch", eps=EPS, normalisation="per-policy")
    torch.testing.assert_close(peer.advantages, torch.full((2, 2), 5.0))
    assert peer.clip_fraction == 1.0


def test_per_policy_normalisation_group_scaling_by_hand():
    # Learner [1, 0], peer [1, 1]; "group", eps 0: pooled baseline .75.
    #   per-policy: learner std sqrt(.5) -> [.25, -.75] / .70711 = [.35355, -1.06066]
    #   pooled: pool std of {1, 0, 1, 1} = sqrt(.75 / 3) = .5 -> [.5, -1.5]
    p = pool([[1.0, 0.0]], [[1.0, 1.0]])
    per_policy = xgrpo_advantages(p, 0, torch.ones(1, 2), 1.0, 0.0, math.inf, "group", eps=0.0,
                                  normalisation="per-policy")
    torch.testing.assert_close(per_policy.advantages, torch.tensor([[0.25 / math.sqrt(0.5), -0.75 / math.sqrt(0.5)]]))
    pooled = xgrpo_advantages(p, 0, torch.ones(1, 2), 1.0, 0.0, math.inf, "group", eps=0.0)
    torch.testing.assert_close(pooled.advantages, torch.tensor([[0.5, -1.5]]))


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_per_policy_equals_pooled_for_a_pool_of_one_and_rejects_unknown_names(scale):
    rewards = torch.tensor([[[1.0, 0.0, 1.0]], [[0.0, 0.0, 1.0]]])  # [P=2, M=1, K=3]
    a = xgrpo_advantages(rewards, 0, torch.ones(2, 3), 0.2, 0.0, math.inf, scale, normalisation="per-policy")
    b = xgrpo_advantages(rewards, 0, torch.ones(2, 3), 0.2, 0.0, math.inf, scale, normalisation="pooled")
    torch.testing.assert_close(a.advantages, b.advantages)
    with pytest.raises(ValueError, match="normalisation"):
        xgrpo_advantages(rewards, 0, torch.ones(2, 3), normalisation="global")


def test_normalisation_is_a_recipe_setting():
    from mutualrl.config import load_run_config

    assert load_run_config("xgrpo-2qwen").config.regime.xgrpo.normalisation == "pooled"
    cfg = load_run_config("xgrpo-2qwen", overrides=["regime.xgrpo.normalisation=per-policy"]).config
    assert cfg.regime.xgrpo.normalisation == "per-policy"

"""HACPO's maths (arXiv 2603.02604, Sec. 3 and App. E), each equation by hand on small tensors, and its limits."""

from __future__ import annotations

import math

import pytest
import torch
from _regimes_strategies import NAN, pool_rewards
from hypothesis import example, given, settings

from mutualrl.regimes.core.grpo import prp_pooled_advantages
from mutualrl.regimes.hacpo.maths import (
    CAPABILITY_FLOOR,
    capability_advantages,
    capability_ratios,
    cross_agent_objective,
    cross_agent_weight,
    discrepancy_coefficients,
    sequence_log_ratio,
    smoothed_capability,
    step_capability,
    stepwise_lower_bound,
)

EPS = 1e-6


# -- 3.1: capability (Eqs. 8-9) ---------------------------------------------------------------
def test_step_capability_is_each_policys_share_of_rewards_above_0_or_its_mean_reward():
    # Policy 0: rewards 1, 0 | 1, 1 -> 3/4.  Policy 1: 0, 0 | 1, NaN -> 1/3 (the unscored one left out).
    pool = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 1.0], [1.0, NAN]]])
    torch.testing.assert_close(step_capability(pool), torch.tensor([0.75, 1 / 3]))
    torch.testing.assert_close(step_capability(pool, "mean-reward"), torch.tensor([0.75, 1 / 3]))  # 0/1: the same
    # Graded rewards: policy 0 0.2, 0.2 | 0.2, 0.2 (format credit on every answer), policy 1 1, 0 | 0, NaN. The
    # authors' share above 0: 1 and 1/3; the mean reward: 0.2 and 1/3. Nothing scored: NaN either way.
    graded = torch.tensor([[[0.2, 0.2], [1.0, 0.0]], [[0.2, 0.2], [0.0, NAN]]])
    torch.testing.assert_close(step_capability(graded), torch.tensor([1.0, 1 / 3]))
    torch.testing.assert_close(step_capability(graded, "mean-reward"), torch.tensor([0.2, 1 / 3]))
    assert step_capability(torch.full((1, 2, 2), NAN)).isnan().all()
    with pytest.raises(ValueError, match="capability measure"):
        step_capability(pool, "median")


def test_smoothed_capability_averages_the_last_k_steps():
    history = torch.tensor([[0.5, 0.2], [0.75, NAN], [1.0, 0.4]])
    # K = 2: steps 2-3 -> (0.75 + 1)/2 = 0.875; policy 1 scored only at step 3 -> 0.4.
    torch.testing.assert_close(smoothed_capability(history, 2), torch.tensor([0.875, 0.4]))
    # K = 3 (more than the window holds: all three) -> 0.75; (0.2 + 0.4)/2 = 0.3.
    torch.testing.assert_close(smoothed_capability(history, 3), torch.tensor([0.75, 0.3]))
    # Nothing solved, or nothing scored: the floor, so that a ratio stays finite.
    torch.testing.assert_close(smoothed_capability(torch.tensor([[0.0, NAN]]), 5),
                               torch.full((2,), CAPABILITY_FLOOR))
    with pytest.raises(ValueError, match="window"):
        smoothed_capability(history, 0)


def test_capability_ratios_and_their_bound():
    # P = (0.8, 0.2): omega(0, 1) = 0.8/0.2 = 4, omega(1, 0) = 1/4.
    torch.testing.assert_close(capability_ratios(torch.tensor([0.8, 0.2])), torch.tensor([[1.0, 4.0], [0.25, 1.0]]))
    # Bounded to [1/3, 3].
    torch.testing.assert_close(capability_ratios(torch.tensor([0.8, 0.2]), 3.0),
                               torch.tensor([[1.0, 3.0], [1 / 3, 1.0]]))


# -- 3.1: the capability-aware advantage (Eqs. 6-7) ----------------------------------------------
def test_capability_advantage_by_hand():
    # Learner 0 rewards [1, 0], peer [0, 1]; the peer is twice as capable: omega(0, 1) = 0.5.
    # Eq. 7: baseline = (1 + 0 + 0.5*0 + 0.5*1)/4 = 0.375 (the plain mean would be 0.5).
    # Eq. 6: sigma_joint = std{1, 0, 0, 1} = sqrt(1/3) (Bessel), A = (r - 0.375)/(sigma + eps).
    pool = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    sigma = math.sqrt(1 / 3) + EPS
    expected = torch.tensor([[[0.625, -0.375], [-0.375, 0.625]]]) / sigma
    torch.testing.assert_close(capability_advantages(pool, torch.tensor([1.0, 0.5]), 0, EPS), expected)


def test_capability_advantage_with_an_unscored_reward():
    # Learner [1, NaN], peer [0, 1], omega(0, 1) = 0.5: baseline = (1 + 0 + 0.5)/3 = 0.5;
    # sigma = std{1, 0, 1} = sqrt(1/3); the unscored rollout gets 0.
    pool = torch.tensor([[[1.0, NAN], [0.0, 1.0]]])
    sigma = math.sqrt(1 / 3) + EPS
    expected = torch.tensor([[[0.5 / sigma, 0.0], [-0.5 / sigma, 0.5 / sigma]]])
    torch.testing.assert_close(capability_advantages(pool, torch.tensor([1.0, 0.5]), 0, EPS), expected)


def test_capability_advantage_guards():
    # The learner is twice as capable: omega(0, 1) = 2.
    weights = torch.tensor([1.0, 2.0])
    # Learner [1, 0], peer [1, 1]: Eq. 7 gives (1 + 0 + 2 + 2)/4 = 1.25, above the best reward 1, so the
    # learner's own mean 0.5 is the baseline; sigma = std{1, 0, 1, 1} = 0.5.
    pool = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])
    torch.testing.assert_close(capability_advantages(pool, weights, 0, EPS),
                               torch.tensor([[[0.5, -0.5], [0.5, 0.5]]]) / (0.5 + EPS))
    # All rewards equal: no signal (Eq. 7 would give 1.5 and -0.5/eps for every rollout).
    uniform = torch.ones(1, 2, 2)
    assert capability_advantages(uniform, weights, 0, EPS).tolist() == [[[0.0, 0.0], [0.0, 0.0]]]


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(rewards=pool_rewards(min_m=2))
@example(rewards=torch.full((1, 3, 1), -1.7137))  # found by a run of the suite: equal rewards, a rounded mean
@example(rewards=torch.full((1, 3, 1), 1.5468004))  # and another (2026-11-29): the guard's own mean rounded too
def test_capability_ratio_one_is_plain_pooled_grpo(rewards):
    # The limit: every capability equal -> PRP's shared-rollout GRPO advantage over the pool, on every prompt whose
    # rewards differ. Where they are all equal HACPO's guard gives exactly 0, while the pooled GRPO advantage (TRL's
    # arithmetic) divides the float32 mean's rounding by eps (three rewards of -1.7137: -0.104 each at eps 1e-6).
    flat = rewards.reshape(rewards.shape[0], -1)  # [P, M*K]
    spread = torch.nan_to_num(flat, nan=-math.inf).amax(dim=1) > torch.nan_to_num(flat, nan=math.inf).amin(dim=1)
    for learner in range(rewards.shape[1]):
        ones = torch.ones(rewards.shape[1])
        ours = capability_advantages(rewards, ones, learner, EPS)  # [P, M, K]
        torch.testing.assert_close(ours[spread], prp_pooled_advantages(rewards, "group", EPS)[spread],
                                   equal_nan=True)
        assert not ours[~spread].any()


# -- 3.2: the discrepancy coefficient (Eq. 10) -------------------------------------------------
def test_discrepancy_coefficient_is_source_over_learner():
    ratios = capability_ratios(torch.tensor([0.8, 0.2]))
    # Learner 0 (0.8) from the weaker peer 1 (0.2): omega(1, 0) = 0.25; its own rows 1.
    torch.testing.assert_close(discrepancy_coefficients(ratios, 0), torch.tensor([1.0, 0.25]))
    # Learner 1 from the stronger peer 0: 4.
    torch.testing.assert_close(discrepancy_coefficients(ratios, 1), torch.tensor([4.0, 1.0]))


# -- 3.3: GSPO's sequence ratio (Eq. 11) and exponential importance sampling (Eq. 12) -----------
def test_sequence_log_ratio_is_the_masked_mean():
    learner = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, 0.0, 0.0]])
    behaviour = torch.tensor([[-1.5, -2.5, -2.0], [-1.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    # Row 0: (0.5 + 0.5 - 1)/3 = 0; row 1: 0.5/1 (the padding's 9s left out).
    torch.testing.assert_close(sequence_log_ratio(learner, behaviour, mask), torch.tensor([0.0, 0.5]))
    # Across tokenizers (the authors' source_mean_logp): the learner's 3 tokens [-1, -2, -3] of a text the source
    # wrote in 2 tokens [-3, -3], its word of two learner tokens spread by THL: trace [-1.5, -1.5, -3]. The learner's
    # mean -2 minus the source's own mean -6/2 = -3: log s = 1 (the learner's count for both gives 0).
    worked = sequence_log_ratio(torch.tensor([[-1.0, -2.0, -3.0]]), torch.tensor([[-1.5, -1.5, -3.0]]),
                                torch.tensor([[1, 1, 1]]), torch.tensor([2.0]))
    torch.testing.assert_close(worked, torch.tensor([1.0]))
    assert sequence_log_ratio(torch.tensor([[-1.0, -2.0, -3.0]]), torch.tensor([[-1.5, -1.5, -3.0]]),
                              torch.tensor([[1, 1, 1]])).item() == 0.0
    # A peer 30 nats per token less likely: clamped to 10 (the authors' bound).
    assert sequence_log_ratio(torch.tensor([[0.0]]), torch.tensor([[-30.0]]), torch.tensor([[1]])).item() == 10.0


# Four peer rows: s = 0.9, 0.5, 1.2, 0.85; A = 2, 1, 1, -1; omega = 1.5, 1, 1, 0.5.
S = torch.tensor([0.9, 0.5, 1.2, 0.85])
A = torch.tensor([2.0, 1.0, 1.0, -1.0])
OMEGA = torch.tensor([1.5, 1.0, 1.0, 0.5])


def test_cross_agent_objective_by_hand():
    # Eq. 50 with alpha = 1, band [0.8, 1]: clip(s) * clip(s) * omega * A
    #   row 0: 0.9 * 0.9 * 1.5 * 2 = 2.43;  row 1: s < 0.8 -> 0.8 * 0.8 * 1 * 1 = 0.64 (no gradient)
    #   row 2: s > 1 -> 1 * 1 * 1 * 1 = 1 (no gradient);  row 3: 0.85^2 * 0.5 * -1 = -0.36125
    objective = cross_agent_objective(S.log(), A, OMEGA, alpha=1.0, lower=0.8)
    torch.testing.assert_close(objective, torch.tensor([2.43, 0.64, 1.0, -0.36125]))
    # alpha = 0 (Eq. 12 off): clip(s) * omega * A -> 0.9 * 1.5 * 2 = 2.7.
    assert cross_agent_objective(S.log(), A, OMEGA, alpha=0.0, lower=0.8)[0].item() == pytest.approx(2.7)
    # No clipping (lower 0, upper inf): row 2 keeps s = 1.2 -> 1.2^2 = 1.44.
    unclipped = cross_agent_objective(S.log(), A, OMEGA, alpha=1.0, lower=0.0, upper=math.inf)
    assert unclipped[2].item() == pytest.approx(1.44)


def test_cross_agent_weight_by_hand_and_as_the_objectives_gradient():
    # w = omega * s^(alpha+1) inside the band, 0 outside: 1.5 * 0.81 = 1.215, 0, 0, 0.5 * 0.7225 = 0.36125.
    weight = cross_agent_weight(S.log(), OMEGA, alpha=1.0, lower=0.8)
    torch.testing.assert_close(weight, torch.tensor([1.215, 0.0, 0.0, 0.36125]))
    # d(objective)/d(log s) = A * w, row by row (autograd through the clip and the stop-gradient).
    log_s = S.log().requires_grad_(True)
    cross_agent_objective(log_s, A, OMEGA, alpha=1.0, lower=0.8).sum().backward()
    torch.testing.assert_close(log_s.grad, A * weight)
    # alpha = 0: 1.5 * 0.9 = 1.35 on row 0; no clipping: row 2 gets 1 * 1.2^2 = 1.44.
    assert cross_agent_weight(S.log(), OMEGA, alpha=0.0, lower=0.8)[0].item() == pytest.approx(1.35)
    assert cross_agent_weight(S.log(), OMEGA, 1.0, 0.0, math.inf)[2].item() == pytest.approx(1.44)


def test_tis_caps_the_weight_and_keeps_the_gradient_flowing():
    """``C = 0.85`` under the band [0.8, 1]: row 0 (s = 0.9) is capped, its gradient weight omega * C^2 = 1.5 * 0.7225
    = 1.08375 (not 0: TIS caps a weight, it does not cut the gradient); row 3 (s = 0.85 = C) is unchanged."""
    log_s = S.log().requires_grad_(True)
    cross_agent_objective(log_s, A, OMEGA, alpha=1.0, lower=0.8, truncation_bound=0.85).sum().backward()
    torch.testing.assert_close(log_s.grad, A * torch.tensor([1.08375, 0.0, 0.0, 0.36125]))
    torch.testing.assert_close(cross_agent_weight(S.log(), OMEGA, 1.0, 0.8, 1.0, 0.85),
                               torch.tensor([1.08375, 0.0, 0.0, 0.36125]))


# -- 3.4: stepwise clipping (Eqs. 13-14) -------------------------------------------------------
def test_stepwise_lower_bound():
    # delta 0.2, step 0.025: 0.8 at the first update, 0.875 at the fourth, never above 1.
    assert stepwise_lower_bound(0.2, 0.025, 0) == pytest.approx(0.8)
    assert stepwise_lower_bound(0.2, 0.025, 3) == pytest.approx(0.875)
    assert stepwise_lower_bound(0.2, 0.025, 100) == 1.0
    # No stepwise schedule: the static band of Eq. 13.
    assert stepwise_lower_bound(0.2, 0.0, 3) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="update_index"):
        stepwise_lower_bound(0.2, 0.025, -1)


# (end to end: tests/test_none_rewards.py trains HACPO on two ranks under ZeRO-3 with its metrics checked)


# -- the adapter, through the seam's fake trainer ----------------------------------------------
@pytest.mark.slow
def test_hacpo_adapter_writes_eq_6_advantages_and_eq_50_weights(thl_tokenizers, tmp_path):
    from test_regimes_seam import peer_then_learner, pool_of

    from mutualrl.regimes.hacpo.adapter import COEFFICIENT, SOURCE_TOKENS

    adapters = pool_of(tmp_path, thl_tokenizers, "hacpo")
    learner, peer = adapters["tiny-sp"], adapters["tiny-bpe"]
    texts = [" hello world", " 45", " 4", " 4 5 6"]  # GPT-2 tokens with EOS 3, 2, 2, 4; SentencePiece 4, 4, 3, 7
    merged = peer_then_learner(learner, peer, texts, [1.0, 0.0, 1.0, 0.0])

    # Capabilities after one step: learner 1/4, peer 2/4 -> omega(learner, peer) = 0.5, Eq. 10's omega(peer,
    # learner) = 2. Prompt p0: learner [0, 0], peer [1, 0]: baseline (0.5 * 1)/4 = 0.125, sigma = std{0, 0, 1, 0}
    # = 0.5. Prompt p1: learner [1, 0], peer [1, 0]: baseline (1 + 0.5)/4 = 0.375, sigma = sqrt(1/3).
    s1 = math.sqrt(1 / 3) + EPS
    own = [-0.125 / (0.5 + EPS), -0.125 / (0.5 + EPS), 0.625 / s1, -0.375 / s1]
    peers = [0.875 / (0.5 + EPS), -0.125 / (0.5 + EPS), 0.625 / s1, -0.375 / s1]
    torch.testing.assert_close(merged["advantages"], torch.tensor(own + peers))
    assert merged[COEFFICIENT].tolist() == [1.0] * 4 + [2.0] * 4
    # TRL's ratio divides by the learner's snapshot on every row (the fake scores -0.5 per token).
    mask = merged["completion_mask"].bool()
    assert (merged["old_per_token_logps"][mask] == -0.5).all()
    # TRL's own loss leaves the peer rows out (its tool_mask), and Eq. 50 is the regime's term on them.
    assert merged["tool_mask"][:4].eq(1).all() and merged["tool_mask"][4:].eq(0).all()
    # s, as the authors' code computes it: the learner's mean token log-prob (-0.5 per learner token, the snapshot)
    # minus the peer's mean over its OWN tokens (the fake's -0.5 per peer token, EOS included), whatever the two
    # token counts: log s = 0 on every row (dividing the peer's total by the learner's count instead, 3 vs 4, 2 vs 4,
    # 2 vs 3 and 4 vs 7 tokens, gave s = 0.882, 0.779, 0.846, 0.807). The peer's own counts (GPT-2, EOS included):
    assert merged[SOURCE_TOKENS][4:].tolist() == [3.0, 2.0, 2.0, 4.0]
    # Eq. 50's gradient weight 2 * s^2 inside the band, 0 outside. With the learner 0.2 nats per token below its
    # snapshot, s = e^-0.2 = 0.819 on every row: inside the first update's band [0.8, 1], outside the fourth's
    # [0.875, 1]. The fake aggregates as TRL's loss_type grpo over the 8 rows, and the adapter scales its term by 8/4
    # (a row weighs what it weighs among the learner's 4 standalone rows), so d loss / d logp_t = -(1/4) (1/L) w A on
    # a peer row's token.
    assert learner.row_scale == 2.0
    for update, shift, expected in ((0, 0.0, [2.0] * 4), (3, 0.0, [2.0] * 4), (0, 0.2, [2 * math.exp(-0.4)] * 4),
                                    (3, 0.2, [0.0] * 4)):
        learner.trainer.state.global_step = update
        logps = (merged["old_per_token_logps"] - shift).requires_grad_(True)  # [8, T] TRL's forward
        learner.trainer.policy_logps = logps
        learner.extra_loss(learner.trainer.model, merged).backward()
        grad = logps.grad.double()  # [8, T]
        assert grad[:4].abs().sum() == 0  # own rows: TRL's term only
        weight = -grad[4:].sum(dim=1) * 4 / merged["advantages"][4:].double()  # [4]
        torch.testing.assert_close(weight, torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=1e-7)
        assert grad[4:][~mask[4:]].abs().sum() == 0  # only the rows' own tokens move
    recorded = learner.trainer.recorded
    assert recorded[("train", "hacpo/capability")] == [0.25] and recorded[("train", "hacpo/capability_ratio")] == [2.0]
    assert recorded[("train", "hacpo/cross_kept")] == [1.0]  # s = 1 at the snapshot: every row in [0.8, 1]

"""PRP: pooled advantages, the two denominators, ratio statistics, channel usability."""

from __future__ import annotations

import math

import pytest
import torch
from _regimes_strategies import NAN, binary_pool, pool_rewards
from hypothesis import given, settings
from hypothesis import strategies as st

from mutualrl.regimes.core.grpo import group_advantages, prp_pooled_advantages
from mutualrl.regimes.core.importance import ratio_statistics
from mutualrl.evaluation.channel_decomposition import USABILITY_CELLS, regime_usability

EPS = 1e-4


def test_pooled_advantages_by_hand():
    # Pool of prompt 0: learner [1, 0], peer [1, 1]; mean 3/4.
    # "none": [[1 - .75, 0 - .75], [.25, .25]].
    # "group": squared deviations 1/16 + 9/16 + 1/16 + 1/16 = 12/16, sample variance 1/4, std 1/2.
    pool = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])
    assert prp_pooled_advantages(pool, "none").tolist() == [[[0.25, -0.75], [0.25, 0.25]]]
    torch.testing.assert_close(
        prp_pooled_advantages(pool, "group"), torch.tensor([[[0.25, -0.75], [0.25, 0.25]]]) / (0.5 + EPS)
    )


def test_pooled_advantages_nan_and_batch():
    # Prompt 0: [1, NaN | 0, 1] -> stats over {1, 0, 1}: mean 2/3; prompt 1: [0, 0 | 0, 0] -> mean 0.
    # Batch std over the 7 scored rewards {1, 0, 1, 0, 0, 0, 0}: mean 2/7,
    #   squared deviations 2 * (5/7)^2 + 5 * (2/7)^2 = (50 + 20)/49 = 70/49, / 6 -> 70/294 = 5/21.
    pool = torch.tensor([[[1.0, NAN], [0.0, 1.0]], [[0.0, 0.0], [0.0, 0.0]]])
    s = math.sqrt(5 / 21) + EPS
    expected = torch.tensor([[[1 / 3, 0.0], [-2 / 3, 1 / 3]], [[0.0, 0.0], [0.0, 0.0]]]) / s
    torch.testing.assert_close(prp_pooled_advantages(pool, "batch"), expected)


@settings(max_examples=100, deadline=None)
@given(rewards=pool_rewards(max_m=1), scale=st.sampled_from(["group", "batch", "none"]))
def test_pool_of_one_is_standalone_grpo(rewards, scale):
    assert torch.equal(prp_pooled_advantages(rewards, scale)[:, 0], group_advantages(rewards[:, 0].contiguous(), scale))


@settings(max_examples=150, deadline=None)
@given(rewards=pool_rewards(), scale=st.sampled_from(["group", "batch", "none"]))
def test_pooled_advantages_have_zero_nan_mean_per_prompt(rewards, scale):
    a = prp_pooled_advantages(rewards, scale)
    scored = ~torch.isnan(rewards)
    for x in range(rewards.shape[0]):
        vals = a[x][scored[x]].double()
        if vals.numel():
            # Centred rewards sum to 0; dividing by (std + eps) >= eps amplifies float error by <= 1e4.
            assert abs(vals.mean().item()) < 1e-6 * 1e4 * (1 + rewards[x][scored[x]].abs().max().item())
        assert bool((a[x][~scored[x]] == 0).all())


def test_pooled_advantages_permute_with_the_policies():
    # The pool is a set: reordering policies reorders the advantages, values unchanged (up to float order).
    g = torch.Generator().manual_seed(2)
    rewards = torch.randint(0, 2, (5, 3, 4), generator=g).float()
    perm = [2, 0, 1]
    torch.testing.assert_close(prp_pooled_advantages(rewards[:, perm]), prp_pooled_advantages(rewards)[:, perm])


def test_ratio_statistics_by_hand():
    # Row 0 tokens 1.0, 1.1, 1.3; row 1 tokens 0.5, 12 (third is padding).
    # Sorted tokens 0.5, 1.0, 1.1, 1.3, 12: p99 at position 0.99 * 4 = 3.96 -> 1.3 + 0.96 * (12 - 1.3) = 11.572.
    # Outside [0.8, 1.2]: 1.3, 0.5, 12 -> 3/5. Rows with a token > 10: row 1 -> 1/2.
    # Sequence ratios: 1.0 * 1.1 * 1.3 = 1.43 and 0.5 * 12 = 6 -> median 3.715,
    #   p99 = 1.43 + 0.99 * (6 - 1.43) = 5.9543, both outside the band -> clip rate 1.
    ratios = torch.tensor([[1.0, 1.1, 1.3], [0.5, 12.0, 99.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    s = ratio_statistics(ratios, mask)
    assert s["token_ratio_p99"] == pytest.approx(11.572)
    assert s["token_clip_rate"] == pytest.approx(0.6)
    assert s["resp_any_ratio_gt10"] == pytest.approx(0.5)
    assert s["seq_ratio_median"] == pytest.approx(3.715)
    assert s["seq_ratio_p99"] == pytest.approx(5.9543)
    assert s["seq_clip_rate"] == pytest.approx(1.0)
    assert s["nan_token_frac"] == 0.0


def test_ratio_statistics_band_edges_and_asymmetric_clip():
    # 0.8 and 1.2 are inside [0.8, 1.2]; with epsilon_high 0.28 (DAPO-style) 1.25 is inside too.
    ratios = torch.tensor([[0.8, 1.2, 1.25, 0.79]])
    mask = torch.ones(1, 4)
    assert ratio_statistics(ratios, mask)["token_clip_rate"] == pytest.approx(2 / 4)
    assert ratio_statistics(ratios, mask, 0.2, 0.28)["token_clip_rate"] == pytest.approx(1 / 4)


def test_ratio_statistics_nan_and_empty():
    # A NaN token is left out of token stats and voids its sequence ratio; a row with no tokens is left out.
    ratios = torch.tensor([[NAN, 1.0], [1.0, 1.0], [5.0, 5.0]])
    mask = torch.tensor([[1, 1], [1, 1], [0, 0]])
    s = ratio_statistics(ratios, mask)
    assert s["nan_token_frac"] == pytest.approx(1 / 4)
    assert s["token_clip_rate"] == 0.0
    assert s["seq_ratio_median"] == 1.0  # only row 1
    assert s["resp_any_ratio_gt10"] == 0.0
    empty = ratio_statistics(torch.ones(2, 2), torch.zeros(2, 2))
    assert all(math.isnan(v) for v in empty.values())


def test_usability_by_hand():
    # Learner = policy 0, one peer, K = 2, "none" scaling, band [0.8, 1.2].
    # Prompt 0: learner [0, 0], peer [1, 0], peer ratios [1.0, 5.0]:
    #   PRP yes (1.0 in band); XGRPO: A_loc 0, pool mean 1/4 -> A_pool -1/4: yes; SGT: yes -> "all".
    # Prompt 1: learner [1, 0], peer [1, 0], ratios [3, 0.1]:
    #   PRP no; pool mean 1/2 = learner mean -> no change; SGT no (learner succeeded) -> "none".
    # Prompt 2: learner [1, 1], peer [0, 0], ratios [0.8, NaN]:
    #   PRP yes (0.8 is the band's closed edge); XGRPO yes (0 -> 1/2); SGT no -> "prp+xgrpo".
    # Prompt 3: learner [0, 0], peer [1, 1], ratios [2, 2]: PRP no; XGRPO yes; SGT yes -> "xgrpo+sgt".
    learner = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    peers = torch.tensor([[[1.0, 0.0]], [[1.0, 0.0]], [[0.0, 0.0]], [[1.0, 1.0]]])
    ratios = torch.tensor([[[1.0, 5.0]], [[3.0, 0.1]], [[0.8, NAN]], [[2.0, 2.0]]])
    u = regime_usability(learner, peers, ratios, scale_rewards="none")
    assert u.prp.tolist() == [True, False, True, False]
    no_ratios = regime_usability(learner, peers, None, scale_rewards="none")  # e.g. eval results
    assert no_ratios.prp.tolist() == [False] * 4 and torch.equal(no_ratios.xgrpo, u.xgrpo)
    assert u.xgrpo.tolist() == [True, False, True, True]
    assert u.sgt.tolist() == [True, False, False, True]
    assert u.table == {
        "none": 0.25,
        "xgrpo_only": 0.0,
        "xgrpo+sgt": 0.25,
        "sgt_only": 0.0,
        "prp_only": 0.0,
        "prp+xgrpo": 0.25,
        "prp+sgt": 0.0,
        "all": 0.25,
    }


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_usability_table_partitions_prompts_and_sgt_implies_xgrpo(data):
    # The paper's verifier rewards are 0/1; with rewards outside [0, 1] (a peer at 2, others at -1)
    # the pooled mean can equal a failed learner's reward and the implication below does not hold.
    rewards = data.draw(binary_pool())
    p, m, k = rewards.shape
    n = p * (m - 1) * k
    ratios = torch.tensor(data.draw(st.lists(st.sampled_from([0.5, 0.9, 1.0, 1.3, NAN]), min_size=n, max_size=n)))
    ratios = ratios.reshape(p, m - 1, k)
    u = regime_usability(rewards[:, 0].contiguous(), rewards[:, 1:].contiguous(), ratios)
    assert sum(u.table.values()) == pytest.approx(1.0)
    assert len(u.table) == len(USABILITY_CELLS) == 8
    # Paper: "SGT usability implies XGRPO usability" (strict gate, scorable rewards).
    assert not bool((u.sgt & ~u.xgrpo).any())


def test_usability_shape_errors():
    with pytest.raises(ValueError, match="peer_seq_ratios must have P=2 rows"):
        regime_usability(torch.zeros(2, 2), torch.zeros(2, 1, 2), torch.zeros(3, 2))


def test_usability_uses_grpo_sample_std_as_trl_trains():
    # Learner [0, 1] in the pool [0, 1, 0, 1]: same mean and population std as the pool, but the sample
    # std differs (0.71 vs 0.58), so TRL's advantages change under pooling: XGRPO-usable.
    u = regime_usability(torch.tensor([[0.0, 1.0]]), torch.tensor([[[0.0, 1.0]]]), None)
    assert u.xgrpo.tolist() == [True]
    same = regime_usability(torch.tensor([[0.0, 1.0]]), torch.tensor([[[1.0, 0.0]]]), None, scale_rewards="none")
    assert same.xgrpo.tolist() == [False]  # no scaling: only the mean matters, and it is the pool's


def test_prp_status_and_plot_metrics_are_ones_it_logs():
    from mutualrl.regimes.prp.spec import PRP

    logged = set(ratio_statistics(torch.ones(1, 2), torch.ones(1, 2), epsilon=0.2)) | {"peer_rows"}
    assert {metric for metric, _ in PRP.status + PRP.metrics} <= logged

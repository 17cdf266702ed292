"""Success-Gated Transfer: gate, selection, row assignment, weights, NLL, metrics, and the no-gate property."""

from __future__ import annotations

import math

import pytest
import torch
from _regimes_strategies import NAN, binary_pool, reward_tensor
from hypothesis import given, settings
from hypothesis import strategies as st

from mutualrl.regimes.core.rescue import choose_rescues, rescue_nll, rescue_rows, rescue_weights
from mutualrl.regimes.core.reward_shapes import split_pool
from mutualrl.regimes.sgt.maths import SGTGate, sgt_gate, sgt_metrics, within_rescue_budget


def select_peer_successes(gate: SGTGate, peer_lengths, selection="random", generator=None) -> torch.Tensor:
    """The rescue's choice on an SGT gate, as SGT's adapter makes it: the gate's verified peer successes are the
    rewards above the threshold (1 > 0.5), the rest 0."""
    return choose_rescues(gate.peer_success.float(), gate.gated, 0.5, generator, selection, peer_lengths)


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


# ---------------------------------------------------------------- gate


def test_gate_by_hand_strict():
    learner = t(
        [
            [0.0, 0.0, 0.0],  # all negative, peer has a 1 -> gated
            [0.0, 1.0, 0.0],  # learner succeeded once -> not gated (strict)
            [0.0, 0.5, 0.0],  # 0.5 is not a negative (< 0.2) -> not gated (strict)
            [0.0, 0.0, 0.0],  # all negative, but peers' best is exactly 0.8, not > 0.8 -> not gated
            [0.1, 0.19, 0.0],  # all below 0.2, peer 0.81 > 0.8 -> gated
            [0.2, 0.0, 0.0],  # 0.2 is not below 0.2 -> not gated
            [NAN, 0.0, 0.0],  # unscorable row ignored, the scored ones are negative -> gated
            [NAN, NAN, NAN],  # nothing scored: no evidence of failure -> not gated
            [0.0, 0.0, 0.0],  # peer success only as NaN -> not gated
        ]
    )
    peers = t(
        [
            [[0.0, 1.0, 0.0]],
            [[1.0, 1.0, 1.0]],
            [[1.0, 0.0, 0.0]],
            [[0.8, 0.8, 0.0]],
            [[0.0, 0.81, 0.0]],
            [[1.0, 0.0, 0.0]],
            [[1.0, 0.0, 0.0]],
            [[1.0, 1.0, 1.0]],
            [[NAN, 0.0, 0.0]],
        ]
    )
    gate = sgt_gate(learner, peers)
    assert gate.gated.tolist() == [True, False, False, False, True, False, True, False, False]
    assert gate.peer_success[3].tolist() == [[False, False, False]]
    assert gate.peer_success[4].tolist() == [[False, True, False]]
    assert gate.peer_success[8].tolist() == [[False, False, False]]


def test_gate_non_strict_needs_one_negative():
    # Non-strict: gated when at least one learner rollout is negative and a peer succeeded.
    learner = t([[0.0, 1.0, 0.0], [0.5, 0.5, 0.5], [1.0, 1.0, 0.1]])
    peers = t([[[1.0, 0.0, 0.0]], [[1.0, 0.0, 0.0]], [[0.0, 0.0, 0.9]]])
    assert sgt_gate(learner, peers, require_all_failed=False).gated.tolist() == [True, False, True]
    assert sgt_gate(learner, peers, require_all_failed=True).gated.tolist() == [False, False, False]


def test_gate_thresholds_are_settings():
    # With success > 0.4 and negative < 0.3, learner [0.25, 0.1] fails and peer 0.5 succeeds.
    gate = sgt_gate(t([[0.25, 0.1]]), t([[[0.5, 0.0]]]), success_threshold=0.4, failure_threshold=0.3)
    assert gate.gated.tolist() == [True]
    with pytest.raises(ValueError, match="must not exceed success_threshold"):
        sgt_gate(t([[0.0]]), t([[[1.0]]]), success_threshold=0.2, failure_threshold=0.8)


def test_gate_with_several_peers():
    # M = 3: the success may come from either peer.
    learner = t([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    peers = t([[[0.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]])
    assert sgt_gate(learner, peers).gated.tolist() == [True, True, False]


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_strict_gate_never_fires_when_a_learner_rollout_succeeded(data):
    p, m, k = data.draw(st.integers(1, 5)), data.draw(st.integers(2, 4)), data.draw(st.integers(1, 5))
    learner = data.draw(reward_tensor((p, k)))
    peers = data.draw(reward_tensor((p, m - 1, k)))
    gate = sgt_gate(learner, peers)
    learner_succeeded = (learner > 0.8).any(dim=1)
    assert not bool((gate.gated & learner_succeeded).any())
    # And it fires exactly when the definition says so.
    scored = ~torch.isnan(learner)
    failed = ((learner < 0.2) | ~scored).all(dim=1) & (learner < 0.2).any(dim=1)
    assert gate.gated.tolist() == (failed & (peers > 0.8).flatten(1).any(dim=1)).tolist()


# ---------------------------------------------------------------- selection


@pytest.mark.slow  # over 2 s: outside the fast tier
@settings(max_examples=150, deadline=None)
@given(data=st.data(), selection=st.sampled_from(["random", "shortest"]), seed=st.integers(0, 1000))
def test_selected_peer_success_is_a_success(data, selection, seed):
    p, m, k = data.draw(st.integers(1, 5)), data.draw(st.integers(2, 4)), data.draw(st.integers(1, 5))
    learner = data.draw(reward_tensor((p, k)))
    peers = data.draw(reward_tensor((p, m - 1, k)))
    lengths = torch.tensor(data.draw(st.lists(st.integers(1, 9), min_size=p * (m - 1) * k, max_size=p * (m - 1) * k)))
    gate = sgt_gate(learner, peers)
    chosen = select_peer_successes(gate, lengths.reshape(p, m - 1, k), selection, torch.Generator().manual_seed(seed))
    for x in range(p):
        j, i = chosen[x].tolist()
        if gate.gated[x]:
            assert peers[x, j, i] > 0.8
        else:
            assert (j, i) == (-1, -1)


def test_random_selection_is_uniform_over_all_successes_not_over_peers():
    # Peer slot 0 has one success (sample 1), peer slot 1 has three (samples 0, 2, 3).
    # Uniform over S_x: each of the 4 successes has probability 1/4, so peer 0 is chosen 1/4 of the
    # time (not 1/2). 8000 copies of the prompt: standard error sqrt(.25 * .75 / 8000) = 0.0048.
    n = 8000
    learner = torch.zeros(n, 4)
    peers = t([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 1.0]]).expand(n, 2, 4)
    gate = sgt_gate(learner, peers)
    chosen = select_peer_successes(gate, torch.ones(n, 2, 4), "random", torch.Generator().manual_seed(0))
    pairs = [tuple(c) for c in chosen.tolist()]
    counts = {pair: pairs.count(pair) / n for pair in set(pairs)}
    assert set(counts) == {(0, 1), (1, 0), (1, 2), (1, 3)}
    for freq in counts.values():
        assert abs(freq - 0.25) < 0.025


def test_random_selection_is_deterministic_given_the_generator():
    learner = torch.zeros(50, 3)
    peers = torch.ones(50, 2, 3)
    gate = sgt_gate(learner, peers)
    a = select_peer_successes(gate, torch.ones(50, 2, 3), "random", torch.Generator().manual_seed(4))
    b = select_peer_successes(gate, torch.ones(50, 2, 3), "random", torch.Generator().manual_seed(4))
    c = select_peer_successes(gate, torch.ones(50, 2, 3), "random", torch.Generator().manual_seed(5))
    assert torch.equal(a, b) and not torch.equal(a, c)
    with pytest.raises(ValueError, match="needs a torch.Generator"):
        select_peer_successes(gate, torch.ones(50, 2, 3), "random", None)


def test_shortest_selection_by_hand_with_ties():
    # Prompt 0: successes (0,1) len 7, (1,0) len 5, (1,2) len 5 -> shortest 5, tie -> lower peer
    #           slot wins: both are peer 1, lower sample index -> (1, 0). Failure (0,0) len 1 is ignored.
    # Prompt 1: successes (0,2) len 3 and (1,1) len 3 -> tie -> lower peer slot -> (0, 2).
    # Prompt 2: learner succeeded -> not gated -> (-1, -1).
    learner = t([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    peers = t(
        [
            [[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]],
            [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]],
            [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]],
        ]
    )
    lengths = torch.tensor([[[1, 7, 2], [5, 9, 5]], [[4, 4, 3], [4, 3, 4]], [[1, 1, 1], [1, 1, 1]]])
    chosen = select_peer_successes(sgt_gate(learner, peers), lengths, "shortest")
    assert chosen.tolist() == [[1, 0], [0, 2], [-1, -1]]


def test_pool_of_one_has_no_peers_and_never_gates():
    gate = sgt_gate(torch.zeros(3, 2), torch.zeros(3, 0, 2))
    assert not bool(gate.gated.any())
    for selection in ("random", "shortest"):
        chosen = select_peer_successes(gate, torch.zeros(3, 0, 2), selection, torch.Generator().manual_seed(0))
        assert chosen.tolist() == [[-1, -1]] * 3


def test_selection_bad_inputs():
    gate = sgt_gate(torch.zeros(2, 3), torch.ones(2, 1, 3))
    with pytest.raises(ValueError, match=r"peer_lengths must have the peer shape \[P, M-1, K\]"):
        select_peer_successes(gate, torch.ones(2, 3), "shortest")
    with pytest.raises(ValueError, match="'random' or 'shortest'"):
        select_peer_successes(gate, torch.ones(2, 1, 3), "longest")


def test_a_prompt_rescued_up_to_its_budget_is_gated_no_more():
    """``max_rescues_per_prompt``: gated'(x) = gated(x) and rescued_before(x) < c; unset, the gate is the paper's."""
    learner = t([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])  # [P=4, K=2]: prompts 0-2 failed, 3 did not
    peers = t([[[1.0, 0.0]], [[1.0, 1.0]], [[0.0, 1.0]], [[1.0, 1.0]]])  # [P, M-1=1, K]: a success on each
    gate = sgt_gate(learner, peers)
    assert gate.gated.tolist() == [True, True, True, False]
    before = torch.tensor([0, 2, 1, 5])  # [P]: steps that rescued each prompt before this one
    capped = within_rescue_budget(gate, before, 2)
    assert capped.gated.tolist() == [True, False, True, False]  # prompt 1 has had its two lessons
    assert capped.learner_failed.tolist() == gate.learner_failed.tolist()  # the rest of the gate is kept
    assert within_rescue_budget(gate, before, 1).gated.tolist() == [True, False, False, False]
    assert within_rescue_budget(gate, before, None) is gate
    with pytest.raises(ValueError, match=">= 1 or unset"):
        within_rescue_budget(gate, before, 0)
    with pytest.raises(ValueError, match="rescued_before must have the shape of gated"):
        within_rescue_budget(gate, before[:3], 2)


# ---------------------------------------------------------------- rows and weights


def test_assign_rows_caps_pairs_per_prompt():
    gated = torch.tensor([True, False, True])
    # cap 1: first row of each gated prompt.
    assert rescue_rows(gated, 3, 1).tolist() == [[True, False, False], [False] * 3, [True, False, False]]
    # cap 2: first two rows; cap 5 > K = 3: all three; cap 0: none.
    assert rescue_rows(gated, 3, 2).tolist() == [[True, True, False], [False] * 3, [True, True, False]]
    assert rescue_rows(gated, 3, 5).tolist() == [[True] * 3, [False] * 3, [True] * 3]
    assert not bool(rescue_rows(gated, 3, 0).any())
    with pytest.raises(ValueError, match=r"gated must be a \[P\] bool"):
        rescue_rows(torch.tensor([1, 0]), 3)


def test_example_weights_by_hand():
    # 8 rows, 2 gated, lambda 0.1, one generation batch = one accumulation window (S = G = 1):
    # w = 0.1 / 2 = 0.05 on gated rows.
    mask = torch.tensor([False, True, False, False, False, True, False, False])
    w = rescue_weights(mask, 0.1, 1, 1)
    torch.testing.assert_close(w, 0.05 * mask.float())
    # S = 4 micro-batches per generation, G = 2 per step, 2 ranks, 8 gated rows over both ranks:
    # w = 0.1 * 4 * 2 / (2 * 8) = 0.05.
    w = rescue_weights(mask, 0.1, 4, 2, num_gated=8, num_processes=2)
    torch.testing.assert_close(w, 0.05 * mask.float())
    # S = G = 4 on one rank: w = 0.1 * 4 / (4 * 2) = 0.05 -- only the ratio S/G matters.
    torch.testing.assert_close(rescue_weights(mask, 0.1, 4, 4), 0.05 * mask.float())


def test_example_weights_reproduce_lambda_times_gated_mean_over_a_generation_batch():
    # Walk TRL's schedule: shuffle the generation batch, cut it into S micro-batches, add
    # rescue_nll of each; G micro-batches make one optimizer step. Over the whole generation
    # batch the steps sum to (S/G) * lambda * mean_gated(NLL), i.e. lambda * mean per step.
    g = torch.Generator().manual_seed(0)
    b, tlen, s, gacc, lam = 24, 6, 6, 3, 0.1
    logps = -torch.rand(b, tlen, generator=g) * 3
    mask = torch.rand(b, tlen, generator=g) > 0.3
    rows = torch.rand(b, generator=g) > 0.6
    w = rescue_weights(rows, lam, s, gacc)
    perm = torch.randperm(b, generator=g)
    total = sum(
        rescue_nll(logps[idx], mask[idx], w[idx]) for idx in perm.chunk(s)
    )
    per_row = -(logps * mask).sum(1) / mask.sum(1).clamp(min=1)
    expected = (s / gacc) * lam * per_row[rows].mean()
    torch.testing.assert_close(total, expected)


def test_example_weights_bad_inputs():
    mask = torch.tensor([True, False])
    with pytest.raises(ValueError, match="num_gated"):
        rescue_weights(mask, 0.1, 1, 1, num_gated=0)
    with pytest.raises(ValueError, match=">= 1"):
        rescue_weights(mask, 0.1, 0, 1)
    with pytest.raises(ValueError, match=r"\[B\] bool"):
        rescue_weights(torch.ones(2), 0.1, 1, 1)


# ---------------------------------------------------------------- NLL


def test_nll_by_hand():
    # Row 0: log-probs -1, -2 on its 2 tokens (third is padding, -inf) -> token-mean NLL 1.5.
    # Row 1: log-prob -4 on 1 token (rest padding, NaN) -> 4.
    # Weights 0.5 and 0.25: 0.5 * 1.5 + 0.25 * 4 = 0.75 + 1 = 1.75.
    logps = torch.tensor([[-1.0, -2.0, -math.inf], [-4.0, NAN, NAN]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss = rescue_nll(logps, mask, torch.tensor([0.5, 0.25]))
    assert loss.item() == pytest.approx(1.75)
    loss.backward()
    # d loss / d logp = -w / n_tokens on masked positions, 0 elsewhere: -0.25, -0.25 | -0.25.
    assert logps.grad.tolist() == [[-0.25, -0.25, 0.0], [-0.25, 0.0, 0.0]]


def test_nll_zero_weight_rows_contribute_exact_zero():
    # A zero-weight row whose log-probs are -inf in the mask must not produce NaN (0 * inf).
    logps = torch.tensor([[-math.inf, -1.0], [-2.0, -2.0]], requires_grad=True)
    loss = rescue_nll(logps, torch.ones(2, 2), torch.tensor([0.0, 1.0]))
    assert loss.item() == 2.0
    # A row with an empty mask counts max(1, 0) = 1 token and sums nothing: NLL 0.
    assert rescue_nll(torch.tensor([[-3.0]]), torch.tensor([[0]]), torch.tensor([1.0])).item() == 0.0


def test_nll_shape_errors():
    with pytest.raises(ValueError, match=r"weights must have shape \[R\]"):
        rescue_nll(torch.zeros(2, 3), torch.ones(2, 3), torch.ones(3))
    with pytest.raises(ValueError, match="mask must have the shape of logps"):
        rescue_nll(torch.zeros(2, 3), torch.ones(2, 2), torch.ones(2))
    with pytest.raises(ValueError, match="'mean' or 'sum'"):
        rescue_nll(torch.zeros(2, 3), torch.ones(2, 3), torch.ones(2), "max")


def test_the_rescue_reduction_sum_is_the_papers_sequence_nll_and_mean_its_per_token_average():
    """``rescue_reduction``: the same answer as 3 tokens (a tokenizer that splits it) or 2 (one that merges it), each
    of log-prob -1 a token: ``sum`` weighs it by its tokens (3 vs 2 nats), ``mean`` by one (1 nat each)."""
    logps = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -1.0, -7.0]])  # [R=2, T=3]; the 7 is masked out
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])  # [R, T]
    weights = torch.tensor([0.5, 0.25])  # [R]
    assert rescue_nll(logps, mask, weights, "sum").item() == pytest.approx(0.5 * 3 + 0.25 * 2)
    assert rescue_nll(logps, mask, weights, "mean").item() == pytest.approx(0.5 * 1 + 0.25 * 1)
    assert rescue_nll(logps, mask, weights).item() == rescue_nll(logps, mask, weights, "mean").item()


def test_every_regime_with_the_rescue_offers_its_reduction():
    """SGT, opd-sgt and byte-kd declare the rescue's settings once (``RescueGateSettings``): each takes
    ``rescue_reduction`` from a recipe, default ``mean``, and refuses another word."""
    from mutualrl.config import load_run_config
    from mutualrl.config.typed import ConfigError
    from mutualrl.regimes.core.registry import settings_regimes
    from mutualrl.regimes.core.rescue_spec import RescueGateSettings

    keys = sorted(spec.settings_key for spec in settings_regimes() if issubclass(spec.settings, RescueGateSettings))
    assert {"bytekd", "opdsgt", "sgt"} <= set(keys)
    for key in keys:
        config = load_run_config("tiny", overrides=[f"regime.{key}.rescue_reduction=sum"], check_grpo=False).config
        assert getattr(config.regime, key).rescue_reduction == "sum"
        assert getattr(load_run_config("tiny", check_grpo=False).config.regime, key).rescue_reduction == "mean"
        with pytest.raises(ConfigError, match="rescue_reduction"):
            load_run_config("tiny", overrides=[f"regime.{key}.rescue_reduction=max"], check_grpo=False)


# ---------------------------------------------------------------- metrics


def test_metrics_by_hand():
    # M = 2, K = 2, P = 4, learner = policy 0.
    # Prompt 0: learner [0, 0], peer [1, 0] -> gated.     Prompt 1: learner [1, 0], peer [1, 1].
    # Prompt 2: learner [0, 0], peer [0, 0] (all fail).   Prompt 3: learner [1, 1], peer [0, 1].
    # gate rate 1/4. Learner successes: gated 0/2; ungated (1 + 0 + 2)/6 = 1/2.
    # Pool successes: gated 1/4; ungated (1 + 2 + 0 + 0 + 2 + 1)/12 = 6/12.
    # All-fail prompts: prompt 2 -> 1/4. Extra tokens 30 of 600 rollout tokens -> 0.05.
    # Extra sequences 1 pair / (4 * 2) = 1/8; bound (M - 1)/(M K) = 1/4.
    learner = t([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    peers = t([[[1.0, 0.0]], [[1.0, 1.0]], [[0.0, 0.0]], [[0.0, 1.0]]])
    gate = sgt_gate(learner, peers)
    got = sgt_metrics(gate, learner, peers, extra_tokens=30, rollout_tokens=600, m=2, k=2)
    assert got == pytest.approx(
        {
            "gate_rate": 0.25,
            "gated_prompts": 1.0,
            "learner_success_rate_gated": 0.0,
            "learner_success_rate_ungated": 0.5,
            "pool_success_rate_gated": 0.25,
            "pool_success_rate_ungated": 0.5,
            "all_fail_prompt_rate": 0.25,
            "extra_token_frac": 0.05,
            "extra_seq_frac": 0.125,
            "extra_seq_frac_bound": 0.25,
        }
    )


def test_metrics_leave_nan_rewards_out_of_rates():
    # Learner [NaN, 0], peer [1, NaN]: gated (scored learner rollout negative, peer success).
    # Pool success on gated prompts: 1 success of 2 scored rollouts.
    learner, peers = t([[NAN, 0.0]]), t([[[1.0, NAN]]])
    got = sgt_metrics(sgt_gate(learner, peers), learner, peers, 5, 10, m=2, k=2)
    assert got["gate_rate"] == 1.0 and got["pool_success_rate_gated"] == 0.5
    assert math.isnan(got["pool_success_rate_ungated"])  # no ungated prompt


@settings(max_examples=150, deadline=None)
@given(rewards=binary_pool())
def test_pool_wide_extra_sequences_within_paper_bound(rewards):
    # App. "Compute overhead": strict gate, one pair per prompt -> pool-wide extra sequences
    # <= (M - 1)/(M K) of the pool's rollouts, and the mean of the per-learner fractions obeys it.
    p, m, k = rewards.shape
    fracs = []
    for n in range(m):
        learner, peers = split_pool(rewards, n)
        gate = sgt_gate(learner, peers)
        fracs.append(sgt_metrics(gate, learner, peers, 0, 1, m, k)["extra_seq_frac"])
    assert sum(fracs) / m <= (m - 1) / (m * k) + 1e-12


# ---------------------------------------------------------------- nothing gated -> nothing added


@settings(max_examples=100, deadline=None)
@given(data=st.data(), selection=st.sampled_from(["random", "shortest"]))
def test_no_gate_adds_exactly_nothing(data, selection):
    # Every learner group contains a success, so the strict gate cannot fire.
    p, m, k = data.draw(st.integers(1, 5)), data.draw(st.integers(2, 4)), data.draw(st.integers(1, 5))
    learner = data.draw(reward_tensor((p, k)))
    learner[:, 0] = 1.0
    peers = data.draw(reward_tensor((p, m - 1, k)))
    gate = sgt_gate(learner, peers)
    assert not bool(gate.gated.any())
    chosen = select_peer_successes(gate, torch.ones(p, m - 1, k), selection, torch.Generator().manual_seed(0))
    assert bool((chosen == -1).all())
    rows = rescue_rows(gate.gated, k, data.draw(st.integers(0, 3))).reshape(-1)
    assert not bool(rows.any())
    w = rescue_weights(rows, 0.1, 2, 1)
    assert bool((w == 0).all())
    logps = torch.full((p * k, 3), -math.inf, requires_grad=True)
    loss = rescue_nll(logps, torch.ones(p * k, 3), w)
    assert loss.item() == 0.0
    loss.backward()
    assert bool((logps.grad == 0).all())
    got = sgt_metrics(gate, learner, peers, 0, 100, m, k)
    assert got["gate_rate"] == 0.0 and got["extra_seq_frac"] == 0.0 and got["extra_token_frac"] == 0.0
    # No auxiliary sequences at all is also exactly zero.
    assert rescue_nll(torch.zeros(0, 0), torch.zeros(0, 0), torch.zeros(0)).item() == 0.0


def test_gate_shape_errors():
    with pytest.raises(ValueError, match=r"peer_rewards must have shape \[P=2, M-1, K=3\]"):
        sgt_gate(torch.zeros(2, 3), torch.zeros(2, 1, 4))
    with pytest.raises(ValueError, match=r"learner_rewards must have shape \[P, K\]"):
        sgt_gate(torch.zeros(2, 3, 1), torch.zeros(2, 1, 3))
    one = torch.tensor([True])
    bad = SGTGate(one, torch.zeros(2, 1, 2, dtype=torch.bool), one, one)
    with pytest.raises(ValueError, match=r"gate.gated must have shape \[P\]"):
        sgt_metrics(bad, torch.zeros(2, 2), torch.zeros(2, 1, 2), 0, 1, 2, 2)


# ---------------------------------------------------------------- rescue log-prob (summary metric)


def test_rescue_logprob_is_the_mean_sequence_logprob_of_rows_that_carry_the_term():
    from mutualrl.regimes.core.rescue import rescue_logprob

    logps = t([[-1.0, -2.0, -9.0], [-0.5, -0.5, -0.5], [-3.0, float("-inf"), 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    weights = t([0.5, 0.0, 0.5])  # row 1 carries no rescue; masked -inf never leaks
    # row 0: -1 - 2 = -3 ; row 2: -3 ; mean -3
    assert rescue_logprob(logps, mask, weights) == pytest.approx(-3.0)
    assert rescue_logprob(logps, mask, t([0.0, 1.0, 0.0])) == pytest.approx(-1.5)
    assert math.isnan(rescue_logprob(logps, mask, t([0.0, 0.0, 0.0])))

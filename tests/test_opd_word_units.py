"""Cross-policy quantities where two tokenizations split a word differently: exact per word, by enumeration.

The text is two words: ``W1 = y0 y1`` (the learner writes it in two tokens, the peer in one) and ``W2 = " " y2`` (one
token on both sides), over a vocabulary of 3 characters: 27 texts. The learner is autoregressive over its tokens
(``y1`` depends on ``y0``, ``y2`` on ``y1``); the peer has a distribution over whole words ``W1`` (9 outcomes) and
over ``W2`` given ``W1``. The peer's log-probs reach the learner's tokens through THL itself
(:func:`~mutualrl.thl.align_logprobs`: ``W1``'s spread over ``y0``, ``y1``; ``W2``'s copied), and the comparison units
through :func:`~mutualrl.regimes.core.word_units.comparison_groups`.

- OPD, through TRL 1.16's own loss by autograd: each text's gradient is ``λ Σ_u (log π_θ(u) − log π_T(u)) ∇log π_θ(u)``
  and its expectation over the learner's 27 texts is the exact gradient of ``KL(π_θ(W1) ‖ π_T(W1)) + E_{W1}
  KL(π_θ(W2 | W1) ‖ π_T(W2 | W1))`` (prefixes held fixed); a peer equal to the learner word for word gives 0. The
  spread per-token estimator (before) does not.
- F-TIS's filter figure on the peer's 27 texts: ``E_gen[rlogr-sum]`` is the same two KLs (learner ‖ generator), 0
  for a peer equal to the learner word for word; per spread token it was not.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from test_regimes_opd import grad_trainer  # noqa: F401 - the module's tiny TRL trainer, a fixture

from mutualrl.regimes.core.word_units import comparison_groups, unit_heads, unit_totals
from mutualrl.regimes.opd.maths import distillation_signal, opd_advantages
from mutualrl.regimes.prp.maths import sequence_kl
from mutualrl.thl import align_logprobs

V, T, LAM = 3, 3, 0.7
CHARS = "abc"
LEARNER_SPANS = np.array([[0, 1], [1, 2], [2, 4]])  # y0 | y1 | " y2"
PEER_SPANS = np.array([[0, 2], [2, 4]])  # y0y1 | " y2"

THETA0 = torch.tensor([0.3, -0.2, 1.1], dtype=torch.float64)  # [V] logits of y0
THETA1 = torch.tensor([[-0.4, 0.9, 0.0], [1.2, -0.3, 0.2], [0.1, 0.5, -0.8]], dtype=torch.float64)  # [V, V] y1 | y0
THETA2 = torch.tensor([[0.6, -0.1, 0.4], [-0.9, 0.3, 0.7], [0.2, 0.2, -0.5]], dtype=torch.float64)  # [V, V] y2 | y1
PEER_W1 = torch.log_softmax(torch.tensor([1.0, 0.2, -0.5, 0.1, 0.1, 1.3, -0.7, 0.4, 0.0], dtype=torch.float64), -1)
PEER_W2 = torch.log_softmax(torch.linspace(-1.0, 1.2, 27, dtype=torch.float64).reshape(9, V).sin() * 2, -1)  # [9, V]


def learner_logps(theta: tuple[torch.Tensor, ...], sample: tuple[int, int, int]) -> torch.Tensor:
    """The learner's log-probs of its 3 tokens ``[T]`` (with the graph of ``theta``)."""
    t0, t1, t2 = theta
    y0, y1, y2 = sample
    return torch.stack([torch.log_softmax(t0, -1)[y0], torch.log_softmax(t1[y0], -1)[y1],
                        torch.log_softmax(t2[y1], -1)[y2]])  # [T]


def learner_word_tables(theta: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """The learner's log-probs of W1 ``[9]`` (index 3·y0 + y1) and of W2 given W1 ``[9, V]``."""
    t0, t1, t2 = theta
    w1 = (torch.log_softmax(t0, -1)[:, None] + torch.log_softmax(t1, -1)).reshape(9)  # [9]
    w2 = torch.log_softmax(t2, -1).repeat(V, 1)  # [9, V]: y2 | y1, W1 = (y0, y1) at row 3·y0 + y1
    return w1, w2


def peer_trace(peer: tuple[torch.Tensor, torch.Tensor], sample: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The peer's log-probs of its 2 tokens moved onto the learner's 3 by THL, and the learner tokens' comparison
    units."""
    w1_table, w2_table = peer
    y0, y1, y2 = sample
    word = 3 * y0 + y1
    text = CHARS[y0] + CHARS[y1] + " " + CHARS[y2]
    own = np.array([float(w1_table[word]), float(w2_table[word, y2])])  # [2] the peer's own tokens
    aligned = align_logprobs([text], [PEER_SPANS], [own], [LEARNER_SPANS])
    return aligned.values[0].astype(np.float64), comparison_groups(aligned.target_units[0], aligned.target_copied[0])


def trl_gradient(trainer, monkeypatch, sample, peer, per_word: bool, sequence: bool = False) -> tuple[torch.Tensor, ...]:
    """``d loss / d θ`` of TRL's loss (``loss_type: grpo``, one row) on ``sample`` with OPD's advantages alone (λ,
    no reward term), times T (TRL's grpo loss is the token mean)."""
    from trl import GRPOTrainer

    theta = tuple(x.clone().requires_grad_(True) for x in (THETA0, THETA1, THETA2))
    own = learner_logps(theta, sample)[None].float()  # [1, T] with its graph

    def forward(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        return own, torch.zeros_like(own), None

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", forward)
    values, groups = peer_trace(peer, sample)
    signal = distillation_signal(own.detach(), torch.tensor(values, dtype=torch.float32)[None, None],
                                 torch.ones(1, 1, T, dtype=torch.bool), torch.ones(1, 1),
                                 torch.from_numpy(groups)[None, None] if per_word else None, sequence)  # [1, T]
    mask = torch.ones(1, T, dtype=torch.long)
    batch = {"prompt_ids": torch.full((1, 2), 5), "prompt_mask": torch.ones(1, 2, dtype=torch.long),
             "completion_ids": torch.tensor([sample]), "completion_mask": mask, "num_items_in_batch": torch.tensor(T),
             "advantages": opd_advantages(torch.zeros(1), signal, mask, LAM, reward_term=False)}  # [1, T]
    trainer.compute_loss(trainer.model, batch).backward()
    return tuple(x.grad * T for x in theta)


def expected_gradient(trainer, monkeypatch, peer, per_word: bool, sequence: bool = False) -> tuple[torch.Tensor, ...]:
    """``E_{y ~ π_θ}`` of the TRL gradient, exactly: Σ over the 27 texts weighted by the learner's probability."""
    total = [torch.zeros_like(x) for x in (THETA0, THETA1, THETA2)]
    for sample in itertools.product(range(V), repeat=T):
        weight = float(learner_logps((THETA0, THETA1, THETA2), sample).sum().exp())
        got = trl_gradient(trainer, monkeypatch, sample, peer, per_word, sequence)
        if per_word or sequence:  # by hand, each text
            values, _ = peer_trace(peer, sample)
            theta = tuple(x.clone().requires_grad_(True) for x in (THETA0, THETA1, THETA2))
            logps = learner_logps(theta, sample)  # [T]
            if sequence:  # λ (log p(y) − log q(y)) ∇ log p(y)
                surrogate = (float(logps.sum().detach()) - values.sum()) * logps.sum()
            else:  # λ Σ_u (log p(u) − log q(u)) ∇ log p(u)
                w1_gap = float(logps[:2].sum().detach()) - (values[0] + values[1])
                w2_gap = float(logps[2].detach()) - values[2]
                surrogate = w1_gap * logps[:2].sum() + w2_gap * logps[2]
            (LAM * surrogate).backward()
            for a, b in zip(got, theta, strict=True):
                assert torch.allclose(a.double(), b.grad, atol=1e-5), sample
        for acc, g in zip(total, got, strict=True):
            acc += weight * g.double()
    return tuple(total)


def word_kl_gradient(peer) -> tuple[torch.Tensor, ...]:
    """The exact gradient of ``λ [KL(p(W1) ‖ q(W1)) + Σ_{W1} sg[p(W1)] KL(p(W2 | W1) ‖ q(W2 | W1))]``."""
    theta = tuple(x.clone().requires_grad_(True) for x in (THETA0, THETA1, THETA2))
    w1, w2 = learner_word_tables(theta)
    q1, q2 = peer
    kl1 = (w1.exp() * (w1 - q1)).sum()
    kl2 = (w1.detach().exp() * (w2.exp() * (w2 - q2)).sum(-1)).sum()
    (LAM * (kl1 + kl2)).backward()
    return tuple(x.grad for x in theta)


def text_kl_gradient(peer) -> tuple[torch.Tensor, ...]:
    """The exact gradient of ``λ KL(p(W1, W2) ‖ q(W1, W2))`` over the 27 whole texts."""
    theta = tuple(x.clone().requires_grad_(True) for x in (THETA0, THETA1, THETA2))
    w1, w2 = learner_word_tables(theta)
    q1, q2 = peer
    lp, lq = w1[:, None] + w2, q1[:, None] + q2  # [9, V] log p(text), log q(text)
    (LAM * (lp.exp() * (lp - lq)).sum()).backward()
    return tuple(x.grad for x in theta)


def learner_as_peer() -> tuple[torch.Tensor, torch.Tensor]:
    """A peer equal to the learner word for word: q(W1) = p(y0) p(y1 | y0), q(W2 | W1) = p(y2 | y1)."""
    return tuple(x.detach() for x in learner_word_tables((THETA0, THETA1, THETA2)))


def test_the_units_thl_gives_a_word_split_two_against_one():
    values, groups = peer_trace((PEER_W1, PEER_W2), (2, 0, 1))
    assert groups.tolist() == [0, 0, 2]  # y0 y1 one unit (spread), " y2" its own token (copied)
    assert values[0] == values[1] == pytest.approx(float(PEER_W1[6]) / 2)
    assert values[2] == pytest.approx(float(PEER_W2[6, 1]))
    delta = torch.tensor([[1.0, 2.0, 4.0]])  # [1, T]
    assert unit_totals(delta, torch.from_numpy(groups)[None]).tolist() == [[3.0, 3.0, 4.0]]
    assert unit_heads(torch.from_numpy(groups)[None]).tolist() == [[True, False, True]]


def test_comparison_groups_by_hand():
    """Units [0, 0, 1, 2, 2, -1] (the last a special token), unit 1 copied, units 0 and 2 spread: groups [0, 0, 2, 3,
    3, 5]; a copied multi-token unit keeps each token its own; nothing spread: every token its own."""
    units = np.array([0, 0, 1, 2, 2, -1])
    copied = np.array([False, False, True, False, False, False])
    assert comparison_groups(units, copied).tolist() == [0, 0, 2, 3, 3, 5]
    assert comparison_groups(np.array([0, 0, 1]), np.array([True, True, False])).tolist() == [0, 1, 2]
    assert comparison_groups(np.array([0, 1, -1]), np.array([True, True, False])).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="positions"):
        unit_totals(torch.zeros(1, 3), torch.tensor([[0, 3, 2]]))


@pytest.mark.slow  # 27 x 3 passes through a tiny trainer's loss: over 2 s
def test_opd_per_word_signal_is_the_word_level_reverse_kl_gradient_through_trls_loss(
        grad_trainer, monkeypatch):  # noqa: F811
    peer = (PEER_W1, PEER_W2)
    got = expected_gradient(grad_trainer, monkeypatch, peer, per_word=True)
    exact = word_kl_gradient(peer)
    for a, b in zip(got, exact, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    assert max(float(x.abs().max()) for x in exact) > 0.05  # a real gradient


@pytest.mark.slow  # 2 x 27 passes through a tiny trainer's loss: over 2 s
def test_a_peer_equal_to_the_learner_word_for_word_gives_zero_expected_opd_signal(
        grad_trainer, monkeypatch):  # noqa: F811
    peer = learner_as_peer()
    per_word = expected_gradient(grad_trainer, monkeypatch, peer, per_word=True)
    assert max(float(x.abs().max()) for x in per_word) < 1e-6
    assert max(float(x.abs().max()) for x in word_kl_gradient(peer)) < 1e-12
    spread = expected_gradient(grad_trainer, monkeypatch, peer, per_word=False)  # each spread token on its own
    assert torch.cat([x.reshape(-1) for x in spread]).norm() > 0.05  # what the signal was: not 0 at the match


def ftis_expectations(peer) -> dict[str, float]:
    """``E_gen[rlogr-sum]`` over the peer's 27 texts, per word (THL's units) and per spread token."""
    out = {"per_word": 0.0, "per_token": 0.0}
    q1, q2 = peer
    for sample in itertools.product(range(V), repeat=T):
        y0, y1, y2 = sample
        p_gen = float((q1[3 * y0 + y1] + q2[3 * y0 + y1, y2]).exp())
        values, groups = peer_trace(peer, sample)
        learner = learner_logps((THETA0, THETA1, THETA2), sample)[None]  # [1, T]
        generator = torch.tensor(values)[None]  # [1, T]
        mask = torch.ones(1, T, dtype=torch.long)
        units = torch.from_numpy(groups)[None]  # [1, T]
        out["per_word"] += p_gen * float(sequence_kl(learner, generator, mask, "rlogr-sum", units))
        out["per_token"] += p_gen * float(sequence_kl(learner, generator, mask, "rlogr-sum"))
    return out


def test_ftis_divergence_per_word_is_the_word_level_kl_and_zero_for_an_equal_peer():
    # A peer equal to the learner word for word: every text's figure is 0, so its expectation is.
    equal = ftis_expectations(learner_as_peer())
    assert equal["per_word"] == pytest.approx(0.0, abs=1e-6)  # THL's values are float32
    assert equal["per_token"] > 0.05  # per spread token the agreeing peer looked distant
    # Another peer: E_gen[Σ_u r log r − r + 1] = KL(p(W1) ‖ q(W1)) + E_{W1 ~ q} KL(p(W2 | W1) ‖ q(W2 | W1)).
    peer = (PEER_W1, PEER_W2)
    w1, w2 = learner_word_tables((THETA0, THETA1, THETA2))
    exact = float((w1.exp() * (w1 - PEER_W1)).sum() + (PEER_W1.exp() * (w2.exp() * (w2 - PEER_W2)).sum(-1)).sum())
    assert ftis_expectations(peer)["per_word"] == pytest.approx(exact, abs=1e-6)  # THL's values are float32
    assert exact > 0.1
    # mean-log-ratio reads word totals only: the units change nothing there
    values, groups = peer_trace(peer, (1, 2, 0))
    learner = learner_logps((THETA0, THETA1, THETA2), (1, 2, 0))[None]
    args = (learner, torch.tensor(values)[None], torch.ones(1, T, dtype=torch.long), "mean-log-ratio")
    assert float(sequence_kl(*args, torch.from_numpy(groups)[None])) == float(sequence_kl(*args))


def test_a_per_token_importance_weight_is_the_words_on_a_split_word():
    """PRP's correction at ``correction_level: token`` (TIS, F-TIS's weight): each token of the split word W1 weighs
    ``min(π_θ(W1) / π_gen(W1), C)``, the word's weight, and ``" y2"`` its own. By hand (C = 3): log w = [log 2,
    log 3, log 0.5] per token, the word's 6 capped at 3 on both its tokens. Exactly (C = inf), over the generator's 9
    outcomes of W1: ``E_gen[w(W1) g(W1)] = E_θ[g(W1)]`` for any g; the spread per-token weights do not give it."""
    from mutualrl.regimes.prp.maths import correction_weights

    groups = torch.tensor([[0, 0, 2]])  # [1, T]
    log_w = torch.log(torch.tensor([[2.0, 3.0, 0.5]]))  # [1, T]
    mask = torch.ones(1, T, dtype=torch.long)
    assert correction_weights(log_w, mask, "tis", "token", 3.0, 10.0, groups).tolist() == [
        [pytest.approx(3.0), pytest.approx(3.0), pytest.approx(0.5)]]
    assert correction_weights(log_w, mask, "tis", "token", 3.0, 10.0).tolist() == [
        [pytest.approx(2.0), pytest.approx(3.0), pytest.approx(0.5)]]  # per spread token, as before
    g = torch.arange(9, dtype=torch.float64) ** 1.5  # [9] any function of W1
    w1_learner, _ = learner_word_tables((THETA0, THETA1, THETA2))
    on_policy = float((w1_learner.exp() * g).sum())
    per_word = per_token = 0.0
    for y0, y1 in itertools.product(range(V), repeat=2):
        sample = (y0, y1, 0)
        values, unit_of = peer_trace((PEER_W1, PEER_W2), sample)
        snapshot = learner_logps((THETA0, THETA1, THETA2), sample)[None]  # [1, T]
        log_w = snapshot - torch.tensor(values)[None]  # [1, T] the learner's snapshot over the aligned trace
        word = correction_weights(log_w, mask, "tis", "token", math.inf, math.inf, torch.from_numpy(unit_of)[None])
        spread = correction_weights(log_w, mask, "tis", "token", math.inf, math.inf)
        q = float(PEER_W1[3 * y0 + y1].exp())
        per_word += q * float(word[0, 0]) * float(g[3 * y0 + y1])
        per_token += q * float(spread[0, 0]) * float(g[3 * y0 + y1])
    assert per_word == pytest.approx(on_policy, rel=1e-6)
    assert abs(per_token - on_policy) > 0.05 * on_policy


# -- the units as the adapters read them, across two real tokenizers ---------------------------------------------------
TEXT = " 12 - 5 = 7"  # Mistral SP: ▁ 1 2 | ▁- | ▁ 5 | ▁= | ▁ 7 (+ EOS); GPT-2: " 12", " -", " 5", " =", " 7" (+ EOS)


@pytest.mark.slow  # THL's first decode and retokenization of two vocabularies: over 2 s
def test_opd_gives_each_token_of_a_split_word_the_words_log_ratio_across_two_real_tokenizers(thl_tokenizers):
    """The Mistral-SP learner writes " 12" in 3 tokens, the GPT-2 judge in 1: through the judging and alignment the
    adapter runs, each of the learner's 3 tokens carries the word's judge log-prob minus the learner's, " -" (▁- on
    both sides, copied) its own token's, and EOS on EOS its own."""
    from test_regimes_opd import ScoringTrainer, own_table, rollouts_of
    from test_regimes_seam import padded

    from mutualrl.regimes.core.judgements import aligned_judgements, judge_rollouts

    learner, judge = padded(thl_tokenizers["mistral-sp"]), padded(thl_tokenizers["gpt2"])
    own, ids = own_table(learner, [TEXT])
    assert len(ids[0]) == 10  # 9 pieces + EOS
    output = {"prompt_ids": torch.tensor([[5, 6]]), "prompt_mask": torch.ones(1, 2, dtype=torch.long)}
    table = judge_rollouts(ScoringTrainer(judge), output, rollouts_of(1, 1), {"tiny-sp": own}, ["tiny-sp"])
    aligned = aligned_judgements(own, {"tiny-bpe": table.records["tiny-sp"].to_table()}, ["tiny-bpe"],
                                 rollouts_of(1, 1), 10)
    # the judge's 6 tokens score -1 .. -6: " 12" -1 (spread: -1/3 on each of ▁ 1 2), " -" -2, " 5" -3, " =" -4,
    # " 7" -5, EOS -6
    assert aligned.groups[0, 0].tolist() == [0, 0, 0, 3, 4, 4, 6, 7, 7, 9]
    own_logps = -0.1 * torch.arange(1, 11, dtype=torch.float32)[None]  # [1, 10] the learner's
    signal = distillation_signal(own_logps, aligned.values, aligned.valid, torch.ones(1, 1), aligned.groups)
    word = -1.0 + 0.1 + 0.2 + 0.3  # the judge's " 12" minus the learner's three tokens
    expected = [word] * 3 + [-2.0 + 0.4] + [-3.0 + 0.5 + 0.6] * 2 + [-4.0 + 0.7] + [-5.0 + 0.8 + 0.9] * 2 + [-6.0 + 1.0]
    assert signal[0].tolist() == pytest.approx(expected, abs=1e-5)


@pytest.mark.slow  # THL's first decode and retokenization of two vocabularies: over 2 s
def test_pooled_rows_read_the_units_and_the_sources_own_count_across_two_real_tokenizers(thl_tokenizers):
    """A GPT-2 peer's row of " 12 - 5 = 7" + EOS (6 tokens) retokenized for a Mistral-SP learner (9 + EOS): the
    comparison units the pooled step keeps (F-TIS's divergence, the correction weights) and the peer's own 6 tokens
    (HACPO's source mean)."""
    from test_regimes_opd import own_table
    from test_regimes_seam import padded

    from mutualrl.regimes.prp.adapter import PRPAdapter
    from mutualrl.thl import retokenize

    peer, learner = padded(thl_tokenizers["gpt2"]), padded(thl_tokenizers["mistral-sp"])
    table, _ = own_table(peer, [TEXT], trace=True)  # the peer's record: its spans, a trace of -1 per token
    mine = retokenize(learner, [TEXT])[0]
    ids = [list(mine.ids) + [learner.eos_token_id]]
    got = PRPAdapter._aligned_traces(None, {"p": table}, [("p", 0)], [TEXT], [True], [np.asarray(mine.spans)], ids)
    assert got.groups[0].tolist() == [0, 0, 0, 3, 4, 4, 6, 7, 7]  # the learner's EOS (index 9) is its own unit
    assert got.source_tokens == [6]
    assert got.traces[0].sum() == pytest.approx(-6.0)  # the peer's whole trace, EOS on EOS


@pytest.mark.slow  # 2 x 27 passes through a tiny trainer's loss: over 2 s
def test_opd_sequence_signal_is_the_text_level_reverse_kl_gradient_through_trls_loss_and_zero_for_an_equal_peer(
        grad_trainer, monkeypatch):  # noqa: F811
    """``signal: sequence``: every token carries the text's log-ratio; per text (checked by hand inside) and in
    expectation, the gradient of the sequence-level reverse KL (word prefixes not held fixed)."""
    peer = (PEER_W1, PEER_W2)
    got = expected_gradient(grad_trainer, monkeypatch, peer, per_word=True, sequence=True)
    exact = text_kl_gradient(peer)
    for a, b in zip(got, exact, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    assert max(float(x.abs().max()) for x in exact) > 0.05
    equal = expected_gradient(grad_trainer, monkeypatch, learner_as_peer(), per_word=True, sequence=True)
    assert max(float(x.abs().max()) for x in equal) < 1e-6

"""opd-sgt (OPD's distillation with SGT's rescue, one objective): its maths by hand, and its gradient through TRL's loss
and the trainer's extra loss, by enumeration over a small vocabulary with a word split 2-vs-1 between the tokenizers.

The enumeration reuses test_opd_word_units's world: the learner writes ``W1 = y0 y1`` in two tokens, the peer in one;
``W2 = " " y2`` is one token on both sides; 3 characters, 27 texts. One learner row (its sample ``y``, a GRPO
advantage ``A``) carries the rescue ``y*`` (a peer success, in the learner's tokens). The trainer's loss is

    L(y) = (1/T) Σ_t −(A + λ δ_t) ρ_t  +  λ_r · (−1/|y*|) Σ_t log π_θ(y*_t)          (ρ = 1 at the snapshot)

so by hand, per text, ``∇L = (1/T) [−A ∇log π_θ(y) + λ Σ_u (log π_θ(u) − log π_T(u)) ∇log π_θ(u)] − (λ_r/|y*|)
∇log π_θ(y*)``, and over the learner's 27 texts its expectation is ``(λ/T) ∇[KL(π_θ(W1) ‖ π_T(W1)) + E_{W1} KL(π_θ(W2
| W1) ‖ π_T(W2 | W1))] − (λ_r/|y*|) ∇log π_θ(y*)``: the reverse KL per word plus the rescue's NLL, one gradient.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from test_opd_word_units import (PEER_W1, PEER_W2, THETA0, THETA1, THETA2, V, learner_logps, peer_trace,
                                 word_kl_gradient)
from test_regimes_opd import grad_trainer  # noqa: F401 - the module's tiny TRL trainer, a fixture

from mutualrl.regimes.opdsgt.maths import (
    choose_rescues,
    combined_advantages,
    distillation_signal,
    rescue_gate,
    rescue_nll,
    rescue_weights,
    source_use,
    teacher_weights,
)

T, LAM, RESCUE_LAM, A = 3, 0.7, 0.3, 0.4
RESCUE = (2, 0, 1)  # y* = "ca b": the peer's two tokens "ca", " b", the learner's three "c", "a", " b"
NAN = float("nan")


def test_teacher_weights_and_rescue_gate_by_hand():
    own = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [NAN, NAN, NAN]])  # [P=4, K=3]
    peers = torch.tensor([[[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]],  # peer 2 is the better teacher
                          [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]],  # own 1/3: only peer 2 (2/3) is above it
                          [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]],  # nobody above 3/3
                          [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]])  # own unscored: no teacher, no rescue
    assert teacher_weights(own, peers, 0.8).tolist() == [[0.0, 1.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]
    ties = torch.tensor([[[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]]])
    assert teacher_weights(torch.zeros(1, 3), ties, 0.8).tolist() == [[1.0, 0.0]]  # a tie: the first peer
    before = torch.tensor([0, 0, 0, 0])
    assert rescue_gate(own, peers, 0.8, 0.2, before, None).tolist() == [True, False, False, False]
    assert rescue_gate(own, peers, 0.8, 0.2, torch.tensor([1, 0, 0, 0]), 1).tolist() == [False, False, False, False]
    assert rescue_gate(own, peers, 0.8, 0.2, torch.tensor([1, 0, 0, 0]), 2).tolist() == [True, False, False, False]
    middling = torch.tensor([[0.0, 0.5, 0.0]])  # one rollout between the thresholds: not a failed group
    assert rescue_gate(middling, peers[:1], 0.8, 0.2, torch.zeros(1), None).tolist() == [False]
    with pytest.raises(ValueError, match="own_rewards"):
        teacher_weights(torch.zeros(4, 2), peers, 0.8)


def test_choose_rescues_is_uniform_over_the_peer_successes_and_seeded():
    peers = torch.tensor([[[1.0, 0.0], [1.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]])  # [P=2, M-1=2, K=2]
    gated = torch.tensor([True, False])
    counts: dict[tuple[int, int], int] = {}
    for seed in range(600):
        chosen = choose_rescues(peers, gated, 0.8, torch.Generator().manual_seed(seed))
        assert chosen[1].tolist() == [-1, -1]  # not gated
        key = tuple(chosen[0].tolist())
        counts[key] = counts.get(key, 0) + 1
    assert sorted(counts) == [(0, 0), (1, 0), (1, 1)]  # the three successes, never the failure (0, 1)
    assert all(150 < n < 250 for n in counts.values())  # each about a third of 600
    first = choose_rescues(peers, gated, 0.8, torch.Generator().manual_seed(3))
    assert torch.equal(first, choose_rescues(peers, gated, 0.8, torch.Generator().manual_seed(3)))


def test_signal_advantages_weights_and_nll_by_hand():
    own = torch.tensor([[-1.0, -2.0, -0.5]])  # [B=1, T=3]
    peer = torch.tensor([[[-0.2, -0.7, -3.0]]])  # [B, M-1=1, T]
    valid = torch.tensor([[[True, True, False]]])
    groups = torch.tensor([[[0, 0, 2]]])  # the first two tokens one word
    signal = distillation_signal(own, peer, valid, torch.ones(1, 1), groups)
    assert signal[0].tolist() == pytest.approx([2.1, 2.1, 0.0])  # (−0.9) − (−3.0) on both tokens of the word
    assert distillation_signal(own, peer, valid, torch.zeros(1, 1), groups).tolist() == [[0.0, 0.0, 0.0]]
    mask = torch.tensor([[1, 1, 0]])
    assert combined_advantages(torch.tensor([0.5]), signal, mask, 0.1)[0].tolist() == pytest.approx([0.71, 0.71, 0.0])
    rows = torch.tensor([True, False, True, False])
    # λ_r S N / (G n): 0.3 · 2 · 1 / (1 · 2) on the rescued rows
    assert rescue_weights(rows, 0.3, 2, 1, 2).tolist() == pytest.approx([0.3, 0.0, 0.3, 0.0])
    assert rescue_weights(torch.zeros(2, dtype=torch.bool), 0.3, 1, 1, 0).tolist() == [0.0, 0.0]
    logps = torch.tensor([[-1.0, -3.0, float("-inf")], [float("nan"), 0.0, 0.0]])
    nll = rescue_nll(logps, torch.tensor([[1, 1, 0], [1, 1, 1]]), torch.tensor([0.5, 0.0]))
    assert nll.item() == pytest.approx(0.5 * 2.0)  # the masked −inf and the unweighted NaN add an exact 0
    used = source_use([torch.tensor([[0.0, 0.1], [0.0, 0.0], [0.0, 0.0]])], torch.tensor([-1, 0, -1]), ["p"])
    assert used["from/p/used_share"].numerator == 2 and used["from/p/used_share"].denominator == 3


def forward_of(theta):
    """The trainer's per-token forward replaced by the enumeration's learner: each row's completion (the last
    ``logits_to_keep`` ids) scored by ``theta``, with its graph."""
    def forward(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        rows = [learner_logps(theta, tuple(int(y) for y in row)) for row in input_ids[:, -logits_to_keep:]]
        logps = torch.stack(rows).float()  # [B, T]
        return logps, torch.zeros_like(logps), None

    return forward


def composite_gradient(trainer, adapter, monkeypatch, sample) -> tuple[torch.Tensor, ...]:
    """``d loss / d θ`` of the trainer's loss (TRL's ``grpo`` loss plus the regime's extra loss) on one row: the
    learner's ``sample`` with advantages ``A + λ δ`` (the peer's THL-aligned trace, per word), carrying the rescue."""
    from trl import GRPOTrainer

    theta = tuple(x.clone().requires_grad_(True) for x in (THETA0, THETA1, THETA2))
    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", forward_of(theta))
    values, groups = peer_trace((PEER_W1, PEER_W2), sample)
    own = learner_logps(theta, sample)[None].detach().float()  # [1, T]
    signal = distillation_signal(own, torch.tensor(values, dtype=torch.float32)[None, None],
                                 torch.ones(1, 1, T, dtype=torch.bool), torch.ones(1, 1),
                                 torch.from_numpy(groups)[None, None])  # [1, T]
    mask = torch.ones(1, T, dtype=torch.long)
    batch = {"prompt_ids": torch.full((1, 2), 5), "prompt_mask": torch.ones(1, 2, dtype=torch.long),
             "completion_ids": torch.tensor([sample]), "completion_mask": mask, "num_items_in_batch": torch.tensor(T),
             "advantages": combined_advantages(torch.tensor([A]), signal, mask, LAM),  # [1, T]
             "opdsgt_completion_ids": torch.tensor([RESCUE]), "opdsgt_completion_mask": mask,
             "opdsgt_weight": rescue_weights(torch.tensor([True]), RESCUE_LAM, 1, 1, 1)}
    monkeypatch.setattr(trainer, "regime", adapter)
    trainer.compute_loss(trainer.model, batch).backward()
    return tuple(x.grad for x in theta)


def by_hand(sample) -> tuple[torch.Tensor, ...]:
    """``(1/T)[−A ∇log p(y) + λ Σ_u (log p(u) − log q(u)) ∇log p(u)] − (λ_r/3) ∇log p(y*)``, the units ``y0 y1`` and
    ``y2``, ``q`` the peer's word log-probs."""
    values, _ = peer_trace((PEER_W1, PEER_W2), sample)
    theta = tuple(x.clone().requires_grad_(True) for x in (THETA0, THETA1, THETA2))
    logps = learner_logps(theta, sample)  # [T]
    w1_gap = float(logps[:2].sum().detach()) - (values[0] + values[1])
    w2_gap = float(logps[2].detach()) - values[2]
    surrogate = -A * logps.sum() + LAM * (w1_gap * logps[:2].sum() + w2_gap * logps[2])
    (surrogate / T - RESCUE_LAM / 3 * learner_logps(theta, RESCUE).sum()).backward()
    return tuple(x.grad for x in theta)


@pytest.mark.slow  # 27 passes through a tiny trainer's loss: over 2 s
def test_the_composite_gradient_by_enumeration_through_trls_loss_across_a_word_split(
        grad_trainer, monkeypatch):  # noqa: F811
    from mutualrl.config import load_run_config
    from mutualrl.regimes.opdsgt.adapter import OPDSGTAdapter

    config = load_run_config("tiny", regime="opd-sgt", check_grpo=False).config
    adapter = OPDSGTAdapter(config, "tiny-sp", exchange=None)
    adapter.bind(grad_trainer)
    expected = [torch.zeros_like(x) for x in (THETA0, THETA1, THETA2)]
    for sample in itertools.product(range(V), repeat=T):
        got = composite_gradient(grad_trainer, adapter, monkeypatch, sample)
        for a, b in zip(got, by_hand(sample), strict=True):
            assert torch.allclose(a.double(), b, atol=1e-5), sample
        weight = float(learner_logps((THETA0, THETA1, THETA2), sample).sum().exp())
        for acc, g in zip(expected, got, strict=True):
            acc += weight * g.double()
    # exact: (λ/T) ∇ (word-level reverse KL) − (λ_r/3) ∇ log p(y*); the constant A's score function has mean 0
    theta = tuple(x.clone().requires_grad_(True) for x in (THETA0, THETA1, THETA2))
    (-RESCUE_LAM / 3 * learner_logps(theta, RESCUE).sum()).backward()
    kl = word_kl_gradient((PEER_W1, PEER_W2))  # λ ∇ KL at test_opd_word_units's λ
    from test_opd_word_units import LAM as KL_LAM

    for acc, k, r in zip(expected, kl, theta, strict=True):
        assert torch.allclose(acc, k * (LAM / KL_LAM) / T + r.grad, atol=1e-5)
    assert max(float(x.abs().max()) for x in kl) > 0.05 and max(float(x.grad.abs().max()) for x in theta) > 0.05

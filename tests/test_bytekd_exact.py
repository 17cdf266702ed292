"""byte-kd over exact next-byte distributions, by enumeration (tests/bytekd_worlds.py).

The learner writes ``"12"`` as one token or as ``"1" "2"`` (both with mass: a non-canonical split), the teacher one
byte a token; ``"1"`` and ``"12"`` are both texts (a word that is a prefix of another). Checked against sums over
every complete token sequence, with no tokenization reasoning:

- the cover enumeration's next-byte distribution at every byte offset, inside ``"12"`` included, and each text's
  probability over its tokenizations; inside a 3-byte character written whole or split 1-2;
- a teacher equal to the learner on every text: KL 0 at every offset of every text the learner can write, and the
  expected loss and gradient 0, through TRL 1.16's loss;
- another teacher: the gradient through TRL's loss is the exact next-byte KL's, on every learner sample;
- the floor's dropped mass is reported, and the canonical approximation's bias on an equal peer is not 0.
"""

from __future__ import annotations

import pytest
import torch
from bytekd_worlds import ByteChainModel, TableModel, brute_next_bytes, brute_texts
from test_regimes_opd import grad_trainer  # noqa: F401 - a fixture

from mutualrl.regimes.bytekd.maths import symbol_kl
from mutualrl.regimes.core.byte_covers import cover_next_byte_logps, find_covers, text_logp
from mutualrl.regimes.core.next_bytes import END

PIECES = [b"1", b"2", b"12", b""]  # the learner: "12" one token or two; the last id its EOS
ALPHABET = b"12"


def learner(seed: int = 1) -> TableModel:
    return TableModel(PIECES, depth=3, seed=seed)


def exact_logq(model: TableModel, tokens, theta=None) -> torch.Tensor:
    text = model.text_of(tokens)
    covers = find_covers(text, model.token_pieces, model.forward(theta), given=tokens)
    states = None if theta is None else torch.stack([model.logps(state, theta) for state in covers.tokens])
    return cover_next_byte_logps(covers, text, model.token_pieces, states)  # [n + 1, 258]


CJK = [b"\xe4", b"\xb8\x80", b"\xe4\xb8\x80", b"1", b""]  # "一" (U+4E00, 3 bytes) whole, or its bytes split 1-2


def test_a_multi_byte_character_split_two_ways_is_compared_byte_by_byte():
    """Inside a character (a token boundary inside its bytes, or none): the exact next-byte distribution at each of
    its byte offsets, by the complete sequences."""
    model = TableModel(CJK, depth=2, seed=2)
    for tokens, _ in model.sequences():
        text = model.text_of(tokens)
        logq = exact_logq(model, tokens)
        for offset in range(len(text) + 1):
            reference = brute_next_bytes(model, text[:offset])
            finite = torch.isfinite(reference)
            assert torch.equal(torch.isfinite(logq[offset]), finite), (text, offset)
            assert (logq[offset][finite].double() - reference[finite]).abs().max() < 1e-5, (text, offset)


def test_the_covers_give_the_exact_next_byte_distribution_at_every_offset_and_each_texts_probability():
    model = learner()
    texts = brute_texts(model)
    worst, inside = 0.0, 0
    for tokens, _ in model.sequences():
        text = model.text_of(tokens)
        logq = exact_logq(model, tokens)
        for offset in range(len(text) + 1):
            reference = brute_next_bytes(model, text[:offset])  # [258]
            finite = torch.isfinite(reference)
            assert torch.equal(torch.isfinite(logq[offset]), finite), (text, offset)
            worst = max(worst, float((logq[offset][finite].double() - reference[finite]).abs().max()))
            inside += offset > 0 and text[offset - 1:offset + 1] == b"12"  # inside the merged token
        covers = find_covers(text, model.token_pieces, model.forward(), given=tokens)
        assert abs(float(text_logp(covers, text, model.token_pieces, True)) - float(texts[text])) < 1e-5
    assert worst < 1e-5 and inside > 0
    # "12" is written two ways, both with mass: the canonical encoding alone is not the text's probability
    pieces = model.token_pieces
    one = model.logps(())[2] + model.logps((2,))[3]
    assert abs(float(one) - float(texts[b"12"])) > 1e-2 and pieces.exact(b"12") == [2]


def byte_kl_loss(model: TableModel, teacher: ByteChainModel, tokens, theta) -> torch.Tensor:
    """``Σ_o KL(q_T(· | b_{<o}) ‖ q_θ(· | b_{<o}))`` over every offset of the learner's text, the teacher's three
    symbols published whole (no rest)."""
    text = model.text_of(tokens)
    own = exact_logq(model, tokens, theta)  # [O, 258]
    symbols = torch.tensor([*ALPHABET, END])
    q_t = torch.stack([teacher.logps(teacher.tokens_of(text[:o])) for o in range(len(text) + 1)])  # [O, 3]
    ids = symbols.expand(len(text) + 1, 3)  # [O, 3]
    return symbol_kl(own[None], ids[None, None], q_t[None, None], torch.ones(1, 1, len(text) + 1))[0].sum()


def test_a_teacher_equal_on_texts_has_kl_and_gradient_zero_at_every_offset_of_every_sample():
    model = learner()
    teacher = ByteChainModel(model, ALPHABET)
    for tokens, _ in model.sequences():
        theta = model.theta.clone().double().requires_grad_(True)
        loss = byte_kl_loss(model, teacher, tokens, theta)
        loss.backward()
        assert abs(loss.item()) < 1e-6 and theta.grad.abs().max() < 1e-6, tokens


@pytest.mark.slow  # autograd through the brute-force sums at every offset of 40 samples: over 2 s
def test_the_gradient_is_the_exact_next_byte_kls_by_enumeration():
    """Against a teacher that differs: the covers' KL and its gradient equal the same KL over brute-force next-byte
    distributions (sums over complete sequences), on every learner sample."""
    model, other = learner(), learner(seed=5)
    teacher = ByteChainModel(other, ALPHABET)
    symbols = torch.tensor([*ALPHABET, END])
    for tokens, _ in model.sequences():
        text = model.text_of(tokens)
        theta = model.theta.clone().double().requires_grad_(True)
        loss = byte_kl_loss(model, teacher, tokens, theta)
        (grad,) = torch.autograd.grad(loss, theta)
        theta_ref = model.theta.clone().double().requires_grad_(True)
        reference = torch.zeros((), dtype=torch.float64)
        for o in range(len(text) + 1):
            q_own = brute_next_bytes(model, text[:o], theta_ref)[symbols]  # [3]
            q_t = teacher.logps(teacher.tokens_of(text[:o])).double()  # [3]
            support = torch.isfinite(q_t)  # [3] the teacher's symbols with mass
            reference = reference + (q_t.exp() * (q_t - q_own))[support].sum()
        (grad_ref,) = torch.autograd.grad(reference, theta_ref)
        assert abs(float(loss) - float(reference)) < 1e-6 and float(loss) > 1e-3
        assert torch.allclose(grad, grad_ref, atol=1e-6), tokens


def test_the_floor_drops_unlikely_tokenizations_and_says_how_much():
    model = learner()
    text, tokens = b"1212", (2, 2)
    exact = find_covers(text, model.token_pieces, model.forward(), given=tokens)
    cut = find_covers(text, model.token_pieces, model.forward(), given=tokens, floor=0.5)
    capped = find_covers(text, model.token_pieces, model.forward(), given=tokens, max_states=1)
    assert exact.dropped == 0.0 and len(exact.tokens) > len(cut.tokens) >= len(capped.tokens)
    assert 0.0 < cut.dropped < 1.0 and 0.0 < capped.dropped < 1.0


def test_the_canonical_approximation_is_biased_on_an_equal_peer():
    """The canonical form: the learner's next-token mass after its own tokens, by first byte. After "1" sampled as
    the token "1" it reads the next byte as if "12" could not have been one token: q("2") differs from the exact
    one (that the exact KL is 0 there is the test above)."""
    model = learner()
    canonical = torch.softmax(model.theta[model.contexts[(0,)]], -1)  # [V] after the token "1"
    exact = exact_logq(model, (0, 1))[1].exp()  # after the byte "1", every tokenization
    assert abs(float(canonical[1]) - float(exact[ord("2")])) > 1e-2


# -- through TRL's loss -----------------------------------------------------------------------------------------------
LAM = 0.6


def trl_gradient(trainer, adapter, monkeypatch, model, teacher, tokens) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL 1.16's whole loss (grpo, one row, advantages 0) with byte-kd's exact term on the learner sample
    ``tokens`` (+ EOS): (loss, d loss / d theta)."""
    from trl import GRPOTrainer

    from mutualrl.regimes.bytekd import exact

    theta = model.theta.clone().requires_grad_(True)
    eos = model.eos

    def logits_of(_model, _prompt_ids, _prompt_mask, ids, mask):  # [N, W, V] the toy's log-probs as logits
        rows = []
        for row, keep in zip(ids.tolist(), mask.tolist(), strict=True):
            length = sum(keep)
            rows.append(torch.stack([model.logps(tuple(row[:p]), theta) if p < length else
                                     torch.zeros(len(PIECES)) for p in range(len(row))]))
        return torch.stack(rows)

    def forward(self, _model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        completion = input_ids[:, -logits_to_keep:].tolist()
        logps = torch.stack([torch.stack([model.logps(tuple(row[:t]), theta)[row[t]] for t in range(len(row))])
                             for row in completion])  # [B, T]
        return logps, torch.zeros_like(logps), None

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", forward)
    monkeypatch.setattr(trainer, "completion_logits", logits_of)
    monkeypatch.setattr(exact, "token_pieces", lambda *_: model.token_pieces)
    monkeypatch.setattr(trainer, "eos_token_ids", [eos])
    text = model.text_of(tokens)
    offsets = len(text) + 1
    q_t = torch.stack([teacher.logps(teacher.tokens_of(text[:o])) for o in range(offsets)])  # [O, 3]
    completion = [*tokens, eos]
    batch = {"prompt_ids": torch.full((1, 2), 0), "prompt_mask": torch.ones(1, 2, dtype=torch.long),
             "completion_ids": torch.tensor([completion]), "completion_mask": torch.ones(1, len(completion),
                                                                                        dtype=torch.long),
             "num_items_in_batch": torch.tensor(len(completion)), "advantages": torch.zeros(1),
             "bytekd_ids": torch.tensor([*ALPHABET, END]).expand(1, 1, offsets, 3),
             "bytekd_logps": q_t[None, None], "bytekd_weights": torch.ones(1, 1, offsets)}
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    return loss.detach(), theta.grad


@pytest.mark.slow  # the tiny trainer of test_regimes_opd, TRL's loss on each of the learner's 40 sequences, twice
def test_through_trls_loss_the_gradient_is_the_exact_kls_and_zero_for_a_peer_equal_on_texts(grad_trainer,
                                                                                           monkeypatch):
    from mutualrl.config import load_run_config
    from mutualrl.regimes.bytekd.adapter import ByteKDAdapter

    config = load_run_config("tiny", overrides=[f"regime.bytekd.lam={LAM}"], regime="byte-kd",
                             check_grpo=False).config
    adapter = ByteKDAdapter(config, "tiny-sp", exchange=None)
    assert adapter.byte_covers is not None  # 'exact' is the default
    adapter.trainer = grad_trainer
    monkeypatch.setattr(grad_trainer, "regime", adapter)
    model = learner()
    equal, other = ByteChainModel(model, ALPHABET), ByteChainModel(learner(seed=5), ALPHABET)
    expected_loss, expected_grad = torch.zeros(()), torch.zeros_like(model.theta)
    for tokens, logp in model.sequences():
        loss, grad = trl_gradient(grad_trainer, adapter, monkeypatch, model, equal, tokens)
        expected_loss += logp.exp() * loss
        expected_grad += logp.exp() * grad
        assert abs(float(loss)) < 1e-6 and grad.abs().max() < 1e-5, tokens
        loss, grad = trl_gradient(grad_trainer, adapter, monkeypatch, model, other, tokens)
        theta = model.theta.clone().requires_grad_(True)
        reference = LAM * byte_kl_loss(model, other, tokens, theta) / (len(tokens) + 1)  # grpo: the row's mean
        (grad_ref,) = torch.autograd.grad(reference, theta)
        assert abs(float(loss) - float(reference)) < 1e-5 and torch.allclose(grad, grad_ref, atol=1e-6), tokens
    assert abs(float(expected_loss)) < 1e-6 and expected_grad.abs().max() < 1e-6


def test_a_record_with_a_distribution_per_byte_offset_is_valid_and_a_wrong_count_is_refused():
    """The judge's exact distributions: ``k`` symbols at each of the text's ``n + 1`` byte offsets (``"é1"``: 3 bytes,
    4 offsets, 2 tokens), accepted by the SEE's checks; a count that is neither per token nor per offset is not."""
    import numpy as np

    from mutualrl.see.errors import InvalidRecordError
    from mutualrl.see.records import RolloutBatch

    def record(values: int):
        return RolloutBatch(prompt_id=["p"], sample_index=[0], prompt_text=["q"], response_text=["é1"],
                            response_token_ids=[[5, 6]], reward=np.zeros(1, np.float32), finished=[False],
                            next_byte_ids=[[49] * values], next_byte_logps=[[-0.5] * values]).to_table()

    assert RolloutBatch.from_table(record(2 * 4)).to_table().num_rows == 1  # k = 2 per offset
    assert RolloutBatch.from_table(record(3 * 2)).to_table().num_rows == 1  # k = 3 per token
    with pytest.raises(InvalidRecordError, match="nor per byte offset for 4 offsets"):
        RolloutBatch.from_table(record(5))
    empty = RolloutBatch(prompt_id=["p"], sample_index=[0], prompt_text=["q"], response_text=[""],
                         response_token_ids=[[]], reward=np.zeros(1, np.float32), finished=[False],
                         next_byte_ids=[[49, 50]], next_byte_logps=[[-0.5, -1.5]]).to_table()
    assert RolloutBatch.from_table(empty).to_table().num_rows == 1  # no token, one offset: k = 2 there

"""Next-byte distillation (regimes/bytekd): the maths by hand, its gradient through TRL's loss across a word two
tokenizers split 2-vs-1 (every text of a small vocabulary), and the judges' distributions across two real tokenizers.

- A model's next-byte distribution is the sum of its next-token probabilities over the tokens that begin with each
  byte (EOS its own symbol), by hand, on a toy vocabulary and on GPT-2's and Mistral's real pieces.
- ``KL(q_T ‖ q_θ)`` over the teacher's published cells and the rest, and its gradient on the learner's logits
  ``π(v)(1 − q_T(c(v))/q_θ(c(v)))``, by hand; a symbol the learner cannot write joins the rest.
- Through TRL 1.16's loss: the learner writes ``y0 | y1 | y2``, the teacher ``y0y1 | y2``; the gradient is the KL's
  at offsets 0 and 2 (the shared boundaries) and nothing at offset 1, on each of the 64 texts; 0 for a teacher equal
  to the learner word for word.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from test_regimes_opd import TEXT, grad_trainer, own_table, rollouts_of  # noqa: F401 - grad_trainer: a fixture
from test_regimes_seam import padded

from mutualrl.regimes.bytekd.maths import shared_boundaries, symbol_kl, teaching_gate
from mutualrl.regimes.core.next_bytes import END, OTHER, SYMBOLS, clean_starts, first_byte_symbols, symbol_logps, \
    top_symbols


# -- next-byte distributions, by hand ----------------------------------------------------------------------------------
def test_a_next_byte_distribution_sums_the_tokens_that_begin_with_each_byte():
    symbols = torch.tensor([ord("4"), ord("4"), ord("?"), END, ord("7")])  # "4" "47" "?" EOS "7"
    logits = torch.tensor([0.1, -3.0, 2.0, 0.5, -1.0])
    pi = torch.softmax(logits, -1)
    logq = symbol_logps(torch.log_softmax(logits, -1), symbols)  # [258]
    assert logq.shape == (SYMBOLS,)
    assert logq[ord("4")].exp().item() == pytest.approx((pi[0] + pi[1]).item())
    assert logq[END].exp().item() == pytest.approx(pi[3].item())
    assert logq.exp().sum().item() == pytest.approx(1.0)  # mass conserved
    assert torch.isneginf(logq[ord("5")]) and torch.isneginf(logq[OTHER])  # no token begins with them
    ids, masses = top_symbols(torch.log_softmax(logits, -1), symbols, 2)
    assert ids.tolist() == [ord("?"), END] and masses.exp().tolist() == pytest.approx([pi[2].item(), pi[3].item()])


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_the_symbols_of_two_real_vocabularies(thl_tokenizers):
    gpt2, mistral = thl_tokenizers["gpt2"], thl_tokenizers["mistral-sp"]
    for tokenizer, pieces in ((gpt2, {"4": "4", "47": "4", "Ġ47": " ", "?": "?"}),
                              (mistral, {"4": "4", "▁": " ", "▁-": " ", "<0x34>": "4"})):
        symbols = first_byte_symbols(tokenizer, len(tokenizer) + 3)  # a model wider than its tokenizer
        vocab = tokenizer.get_vocab()
        assert {piece: chr(int(symbols[vocab[piece]])) for piece in pieces} == pieces
        assert int(symbols[tokenizer.eos_token_id]) == END and (symbols[-3:] == OTHER).all()
    assert int(first_byte_symbols(mistral, len(mistral))[mistral.bos_token_id]) == OTHER
    stop = gpt2.get_vocab()["?"]  # a stop id other than the EOS (TRL's eos_token_ids) ends a generation too
    assert int(first_byte_symbols(gpt2, len(gpt2), [stop])[stop]) == END


def saved_storages(compute) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``compute()``'s result and each distinct storage autograd saved for its backward, as a flat tensor of its
    elements' type (an expanded index is a view of its ``[V]`` table, counted as that)."""
    storages: dict[int, torch.Tensor] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = torch.empty(0, dtype=tensor.dtype).set_(storage)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = compute()
    return out, list(storages.values())


@pytest.mark.parametrize("chunk", [1 << 24, 2 * 600])  # one chunk; 2 rows at a time
def test_next_bytes_from_logits_keep_only_the_logits_for_the_backward(monkeypatch, chunk):
    """``next_byte_logps(z)`` equals ``symbol_logps(log_softmax(z))`` bit for bit and has its gradient (a symbol no
    token has: ``-inf``, no gradient), in chunks of rows; it saves one ``[N, V]`` float32 storage for the backward (the
    logits), where autograd's composition saves two (log-softmax's output, the exponent's)."""
    from mutualrl.regimes.core import next_bytes

    monkeypatch.setattr(next_bytes, "ROWS_PER_CHUNK_ELEMENTS", chunk)
    v = 600  # wider than the 258 symbols: an [N, V] tensor is the largest a step keeps
    symbols = torch.arange(v) % 6  # bytes 0-5 ...
    symbols[3], symbols[7] = END, OTHER  # ... an EOS, a special token
    weights = torch.randn(3, 5, SYMBOLS, generator=torch.Generator().manual_seed(1))  # [3, 5, 258]
    logits = torch.randn(3, 5, v, generator=torch.Generator().manual_seed(0)) * 4  # [3, 5, V]

    def loss_of(logq):  # the finite log-masses weighted: what symbol_kl's use of them looks like
        return (torch.where(torch.isfinite(logq), logq, torch.zeros_like(logq)) * weights).sum()

    lean_in, plain_in = logits.clone().requires_grad_(True), logits.clone().requires_grad_(True)
    lean, lean_saved = saved_storages(lambda: next_bytes.next_byte_logps(lean_in, symbols))
    plain, plain_saved = saved_storages(lambda: symbol_logps(torch.log_softmax(plain_in, -1), symbols))
    assert torch.equal(lean, plain) and int(torch.isinf(lean).sum()) == 3 * 5 * (SYMBOLS - 8)
    loss_of(lean).backward()
    loss_of(plain).backward()
    assert torch.allclose(lean_in.grad, plain_in.grad, atol=1e-5) and lean_in.grad.abs().max() > 0.1
    full = [t for t in lean_saved if t.is_floating_point() and t.numel() == 3 * 5 * v]
    assert len(full) == 1 and full[0].data_ptr() == lean_in.data_ptr()  # the logits themselves, not a copy
    assert len([t for t in plain_saved if t.is_floating_point() and t.numel() == 3 * 5 * v]) == 2


def test_the_divergence_over_cells_and_its_gradient_by_hand():
    symbols = torch.tensor([ord("4"), ord("4"), ord("?"), END, ord("7")])
    logits = torch.tensor([[0.1, -3.0, 2.0, 0.5, -1.0], [0.0, 0.3, -0.2, 0.1, 0.4]], requires_grad=True)  # [T=2, V]
    own = symbol_logps(torch.log_softmax(logits, -1), symbols)[None]  # [1, 2, 258]
    ids = torch.tensor([[[[ord("4"), END, ord("9")], [ord("?"), ord("7"), ord("4")]]]])  # [1, J=1, T=2, k=3]
    q_teacher = torch.tensor([[0.9, 0.05, 0.03], [0.5, 0.2, 0.1]])  # "9": no learner token begins with it: rest
    weights = torch.tensor([[[1.0, 0.0]]])  # the second position: no shared boundary
    kl = symbol_kl(own, ids, q_teacher.log()[None, None], weights)  # [1, 2]
    pi = torch.softmax(logits.detach()[0], -1)
    cell = {0: "4", 1: "4", 2: "R", 3: "E", 4: "R"}
    q_own = {"4": pi[0] + pi[1], "E": pi[3], "R": pi[2] + pi[4]}
    q_t = {"4": 0.9, "E": 0.05, "R": 1 - 0.9 - 0.05}  # "9" joins the rest
    assert kl[0, 0].item() == pytest.approx(sum(q_t[c] * np.log(q_t[c] / float(q_own[c])) for c in q_t))
    assert kl[0, 1].item() == 0.0
    kl.sum().backward()
    expected = [float(pi[v] * (1 - q_t[cell[v]] / q_own[cell[v]])) for v in range(5)]
    assert logits.grad[0].tolist() == pytest.approx(expected, abs=1e-6)
    assert logits.grad[1].abs().max().item() == 0.0
    assert logits.grad[0].sum().item() == pytest.approx(0.0, abs=1e-6)  # softmax: the logits' gradient sums to 0


def test_an_untaught_position_is_an_exact_zero_without_nan():
    own = torch.full((1, 1, SYMBOLS), float("-inf"))
    own[0, 0, :2] = torch.log(torch.tensor([0.5, 0.5]))
    own.requires_grad_(True)
    ids = torch.zeros(1, 2, 1, 4, dtype=torch.long)  # padding: every id 0
    kl = symbol_kl(own, ids, torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1))
    kl.sum().backward()
    assert kl.item() == 0.0 and torch.isfinite(own.grad).all() and own.grad.abs().max().item() == 0.0


@pytest.mark.parametrize("learner, teacher", [((0.7, 0.3), (0.6, 0.39)), ((0.5, 0.5), (0.3, 0.3))])
def test_a_rest_the_learner_cannot_write_counts_its_teacher_mass_and_a_zero_teacher_mass_no_nan(learner, teacher):
    """The learner writes two symbols only; the teacher's rest (0.01, then 0.4) is on symbols it cannot write. The
    figure is the generalised KL over the learner's two cells, ``Σ q_T log(q_T / q_θ) + q_T(R)``, never negative
    (the plain sum over the two cells is -0.306 in the second case), and the gradient is the two cells' alone:
    ``∂/∂ log q_θ(c) = −q_T(c)``."""
    own = torch.full((1, 1, SYMBOLS), float("-inf"))
    own[0, 0, :2] = torch.log(torch.tensor(learner))  # the learner writes symbols 0 and 1 only
    own.requires_grad_(True)
    ids = torch.tensor([[[[0, 1, 5]]]])
    masses = torch.tensor([[[[np.log(teacher[0]), np.log(teacher[1]), float("-inf")]]]])  # the rest: unwritable
    kl = symbol_kl(own, ids, masses, torch.ones(1, 1, 1))
    kl.sum().backward()
    cells = sum(q * np.log(q / p) for q, p in zip(teacher, learner, strict=True))
    assert kl.item() == pytest.approx(cells + 1 - sum(teacher), rel=1e-5) and kl.item() >= 0
    assert own.grad[0, 0, :2].tolist() == pytest.approx([-teacher[0], -teacher[1]], rel=1e-5)
    assert torch.isfinite(own.grad).all() and own.grad[0, 0, 2:].abs().max().item() == 0.0


def test_shared_boundaries_by_hand():
    # "12 3": learner "1" "2" " 3" EOS, judge "12" " 3" EOS; a token that starts inside a shared character is no boundary
    assert clean_starts(np.array([[0, 1], [1, 2], [2, 4], [-1, -1]]), 4).tolist() == [0, 1, 2, 4]
    assert clean_starts(np.array([[0, 2], [1, 3]]), 3).tolist() == [0, -1]
    assert clean_starts(np.array([[0, 2], [-1, -1]]), 3).tolist() == [0, -1]  # an EOS before the text ends
    mine, theirs = np.array([0, 1, 2, 4]), np.array([0, 2, 4])
    assert shared_boundaries(mine, theirs).tolist() == [0, -1, 1, 2]



def test_the_teaching_gate_by_hand():
    """K = 4, two peers. Prompt 0: the learner fails every rollout, peer b has one success: b teaches under both gates.
    Prompt 1: the learner has one rollout at 0.5 (no success, not a failure), a succeeds more: a teaches by
    competence, nobody at the blind spot. Prompt 2: the learner fails all, no peer succeeds: nobody. Prompt 3: nothing
    of the learner's scored: no blind spot (SGT's rescue does not fire there either)."""
    nan = float("nan")
    own = torch.tensor([[0.0, 0.1, 0.0, 0.0], [0.0, 0.5, 0.0, 0.0], [0.0] * 4, [nan] * 4])  # [P, K]
    peers = torch.tensor([[[0.0] * 4, [1.0, 0.0, 0.0, 0.0]], [[1.0, 1.0, 0.0, 0.0], [0.0] * 4],
                          [[0.0] * 4, [0.1] * 4], [[1.0] * 4, [1.0] * 4]])  # [P, J, K]
    own_rate, peer_rates = torch.tensor([0.0, 0.0, 0.0, nan]), torch.tensor([[0.0, 0.25], [0.5, 0.0], [0.0, 0.0],
                                                                             [1.0, 1.0]])  # [P], [P, J]
    assert torch.equal(peer_rates, (peers > 0.8).float().mean(-1))
    competence = teaching_gate(own_rate, peer_rates, own, 0.2, "competence")  # [P, J]
    assert competence.tolist() == [[False, True], [True, False], [False, False], [False, False]]
    blind = teaching_gate(own_rate, peer_rates, own, 0.2, "blind-spot")
    assert blind.tolist() == [[False, True], [False, False], [False, False], [False, False]]
    assert teaching_gate(own_rate, peer_rates, own, 0.6, "blind-spot")[1].tolist() == [True, False]  # 0.5 failed
    with pytest.raises(ValueError, match="gate must be"):
        teaching_gate(own_rate, peer_rates, own, 0.2, "always")


# -- through TRL's loss, a word split 2-vs-1 --------------------------------------------------------------------------
CHARS = "abcd"
LAM, K = 0.7, 2
THETA = torch.tensor([[0.3, -0.2, 1.1, 0.0], [-0.4, 0.9, 0.0, 0.5], [1.2, -0.3, 0.2, -0.6], [0.1, 0.5, -0.8, 0.3],
                      [0.6, -0.1, 0.4, 0.9]], dtype=torch.float32)  # [5, V]: y0's logits, then y1 | y0, y2 | y1
TEACHER_W1 = torch.log_softmax(torch.linspace(-1.0, 1.4, 16).sin() * 2, -1)  # [16] the teacher's 2-char tokens y0y1
TEACHER_Y2 = torch.log_softmax(torch.tensor([[0.2, 0.9, -0.5, 0.0], [1.0, -1.0, 0.3, 0.1], [0.0, 0.0, 0.8, -0.4],
                                             [-0.3, 0.6, 0.1, 0.2]] * 4), -1)  # [16, V] y2 | y0y1


def teacher_cells(sample: tuple[int, int, int], equal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The teacher's published top-``K`` next-byte symbols and log-masses before each of its 2 tokens, by hand:
    before ``y0y1`` the mass of its 2-char tokens summed by first character; before ``y2`` its distribution.
    ``equal``: a teacher equal to the learner word for word (its ``y0y1`` the learner's ``π(y0) π(y1 | y0)``, its
    ``y2`` the learner's ``π(y2 | y1)``)."""
    y0, y1, _ = sample
    first = TEACHER_W1.exp().reshape(4, 4).sum(1)  # [V] by the first character
    second = TEACHER_Y2[4 * y0 + y1].exp()  # [V]
    if equal:
        first, second = torch.softmax(THETA[0], -1), torch.softmax(THETA[1 + y1], -1)  # [V] each
    tops = [torch.topk(q, K) for q in (first, second)]
    ids = torch.stack([torch.tensor([ord(CHARS[i]) for i in top.indices]) for top in tops])  # [2, K]
    return ids, torch.stack([top.values.log() for top in tops])  # [2, K] each


def theta_logps(theta: torch.Tensor, sequence) -> torch.Tensor:
    """``[T]``: the toy learner's log-prob of each token of ``sequence`` (``y_t`` read on row 0 at ``t = 0``, on row
    ``1 + y_{t-1}`` after)."""
    sequence = [int(y) for y in sequence]
    logits = torch.stack([theta[0], *(theta[1 + y] for y in sequence[:-1])])  # [T, V]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(sequence)[:, None])[:, 0]


RESCUE, RESCUE_LAM = (2, 0, 1), 0.4  # a verified peer success "cab", in the learner's tokens; λ_r


def trl_gradient(trainer, monkeypatch, sample, equal: bool = False, rescue: bool = False,
                 kl: bool = True) -> torch.Tensor:
    """``d loss / d THETA`` of TRL's whole loss (grpo, one row, advantages 0) with byte-kd's term, times T; with
    ``rescue`` the row also carries the rescue ``RESCUE`` (SGT's, at ``RESCUE_LAM``); without ``kl`` the batch has no
    teacher distributions (what the adapter writes with ``lam: 0``)."""
    from trl import GRPOTrainer

    from mutualrl.regimes.core.rescue import rescue_weights

    theta = THETA.clone().requires_grad_(True)
    y0, y1, y2 = sample
    logits = torch.stack([theta[0], theta[1 + y0], theta[1 + y1]])[None]  # [1, T=3, V] (y2 | y1: rows 1-4 again)

    def forward(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        logps = torch.stack([theta_logps(theta, row) for row in input_ids[:, -logits_to_keep:]])  # [B, T]
        return logps, torch.zeros_like(logps), None

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", forward)
    monkeypatch.setattr(trainer, "completion_logits", lambda *a, **k: logits)
    at = shared_boundaries(clean_starts(np.array([[0, 1], [1, 2], [2, 3]]), 3),
                           clean_starts(np.array([[0, 2], [2, 3]]), 3))  # [3] learner token → teacher token
    assert at.tolist() == [0, -1, 1]
    ids, masses = teacher_cells(sample, equal)
    hit = torch.from_numpy(at >= 0)
    batch = {"prompt_ids": torch.full((1, 2), 5), "prompt_mask": torch.ones(1, 2, dtype=torch.long),
             "completion_ids": torch.tensor([sample]), "completion_mask": torch.ones(1, 3, dtype=torch.long),
             "num_items_in_batch": torch.tensor(3), "advantages": torch.zeros(1),
             "bytekd_ids": torch.where(hit[:, None], ids[at.clip(0)], 0)[None, None],  # [1, 1, 3, K]
             "bytekd_logps": torch.where(hit[:, None], masses[at.clip(0)], 0.0)[None, None],
             "bytekd_weights": hit.float()[None, None]}  # [1, 1, 3]
    if not kl:
        for key in ("bytekd_ids", "bytekd_logps", "bytekd_weights"):
            del batch[key]
    if rescue:
        batch.update({"bytekd_completion_ids": torch.tensor([RESCUE]),
                      "bytekd_completion_mask": torch.ones(1, 3, dtype=torch.long),
                      "bytekd_weight": rescue_weights(torch.tensor([True]), RESCUE_LAM, 1, 1, 1)})  # [1]
    trainer.compute_loss(trainer.model, batch).backward()
    return theta.grad * 3


def hand_gradient(sample) -> torch.Tensor:
    """``λ Σ_{o ∈ {0, 2}} ∂KL_o / ∂z``: ``π(v)(1 − q_T(c(v))/q_θ(c(v)))`` at each shared offset, on the logits row that
    position reads; the rest cell is every symbol outside the teacher's top K."""
    y0, y1, _ = sample
    ids, masses = teacher_cells(sample)
    grad = torch.zeros_like(THETA)
    for position, row in ((0, 0), (1, 1 + y1)):  # teacher token 0 ↔ learner offset 0, teacher token 1 ↔ offset 2
        pi = torch.softmax(THETA[row], -1)
        top = [CHARS.index(chr(int(i))) for i in ids[position]]
        q_t = {v: float(masses[position][top.index(v)].exp()) for v in top}
        rest_t = 1 - sum(q_t.values())
        rest_own = float(sum(pi[v] for v in range(4) if v not in top))
        for v in range(4):
            ratio = q_t[v] / float(pi[v]) if v in top else rest_t / rest_own
            grad[row, v] += LAM * float(pi[v]) * (1 - ratio)
    return grad


@pytest.mark.slow  # builds a tiny trainer (shared with test_regimes_opd) and runs TRL's loss 64 times
def test_the_gradient_through_trls_loss_across_a_two_vs_one_split(grad_trainer, monkeypatch):
    from mutualrl.config import load_run_config
    from mutualrl.regimes.bytekd.adapter import ByteKDAdapter

    config = load_run_config("tiny", overrides=[f"regime.bytekd.lam={LAM}", "regime.bytekd.distribution=canonical"],
                             regime="byte-kd", check_grpo=False).config
    adapter = ByteKDAdapter(config, "tiny-sp", exchange=None)
    adapter.trainer = grad_trainer
    adapter.symbols = torch.tensor([ord(c) for c in CHARS])  # the learner's 4 tokens
    monkeypatch.setattr(grad_trainer, "regime", adapter)
    for sample in itertools.product(range(4), repeat=3):
        got = trl_gradient(grad_trainer, monkeypatch, sample)
        assert torch.allclose(got, hand_gradient(sample), atol=1e-5), sample
        assert (got[1 + sample[0]] == 0).all() or sample[0] == sample[1]  # offset 1 (inside the teacher's token): none
        assert trl_gradient(grad_trainer, monkeypatch, sample, equal=True).abs().max().item() < 1e-6  # an equal peer


def rescue_hand_gradient() -> torch.Tensor:
    """``−λ_r ∇ Σ_t log π(y*_t)`` (the rescue's token-averaged NLL, times T = 3): ``λ_r (π − e_{y*_t})`` on the
    logits row each position of ``y* = RESCUE`` reads."""
    grad = torch.zeros_like(THETA)
    rows = (0, *(1 + y for y in RESCUE[:-1]))
    for row, y in zip(rows, RESCUE, strict=True):
        grad[row] += RESCUE_LAM * (torch.softmax(THETA[row], -1) - torch.eye(4)[y])
    return grad


@pytest.mark.slow  # the tiny trainer of the test above, 64 more passes through TRL's loss
def test_with_sgts_rescue_the_gradient_is_the_kl_and_the_rescues_nll_by_hand(grad_trainer, monkeypatch):
    """One objective: on each of the 64 texts (split 2-vs-1 as above) carrying the rescue ``y* = "cab"``, TRL's loss
    with byte-kd's extra loss has the gradient of the KL at the shared boundaries plus ``λ_r`` times the rescue's NLL,
    each by hand; neither term is lost or counted twice."""
    from mutualrl.config import load_run_config
    from mutualrl.regimes.bytekd.adapter import ByteKDAdapter

    config = load_run_config("tiny", overrides=[f"regime.bytekd.lam={LAM}", f"regime.bytekd.rescue_lam={RESCUE_LAM}",
                                        "regime.bytekd.distribution=canonical"],
                             regime="byte-kd", check_grpo=False).config
    adapter = ByteKDAdapter(config, "tiny-sp", exchange=None)
    adapter.trainer = grad_trainer
    adapter.symbols = torch.tensor([ord(c) for c in CHARS])  # the learner's 4 tokens
    monkeypatch.setattr(grad_trainer, "regime", adapter)
    rescue = rescue_hand_gradient()
    assert rescue.abs().max() > 0.1
    for sample in itertools.product(range(4), repeat=3):
        got = trl_gradient(grad_trainer, monkeypatch, sample, rescue=True)
        assert torch.allclose(got, hand_gradient(sample) + rescue, atol=1e-5), sample
    alone = trl_gradient(grad_trainer, monkeypatch, (0, 1, 2), rescue=True, kl=False)  # lam 0: the rescue alone
    assert torch.allclose(alone, rescue, atol=1e-5)


# -- the judges' distributions across two real tokenizers -------------------------------------------------------------
@pytest.mark.slow  # THL's first decode and retokenization of two vocabularies: over 2 s
def test_the_shared_boundaries_of_two_real_tokenizers(thl_tokenizers):
    """GPT-2 learner, Mistral SP judge on " 12 - 5 = 7": GPT-2 starts tokens at 0 3 5 7 9 (+ EOS at 11), Mistral at
    0 1 2 3 5 6 7 9 10 (+ EOS at 11): every GPT-2 token starts on a shared boundary, the judge's tokens "1" "2" "5"
    "7" (inside GPT-2's " 12", " 5", " 7") are compared nowhere."""
    from mutualrl.regimes.bytekd.adapter import teacher_distributions
    from mutualrl.thl import retokenize

    learner, judge = padded(thl_tokenizers["gpt2"]), padded(thl_tokenizers["mistral-sp"])
    own, _ = own_table(learner, [TEXT])
    theirs = retokenize(judge, [TEXT])[0]
    n = len(theirs.ids) + 1  # and the EOS
    spans = np.concatenate([theirs.spans, [[-1, -1]]])
    ids = np.arange(n * 2, dtype=np.int32) % SYMBOLS  # judge token i's symbols: 2i, 2i + 1
    from mutualrl.see.records import RolloutBatch

    table = RolloutBatch(prompt_id=["p0"], sample_index=[0], prompt_text=["q"], response_text=[TEXT],
                         response_token_ids=[theirs.ids + [judge.eos_token_id]], response_token_spans=[spans],
                         reward=np.zeros(1, np.float32), finished=[True], behaviour_logps=[[-1.0] * n],
                         next_byte_ids=[ids], next_byte_logps=[-np.arange(n * 2, dtype=np.float32) / 10]).to_table()
    got = teacher_distributions(own, {"tiny-sp": table}, ["tiny-sp"], rollouts_of(1, 1), 6, 2)
    starts = [0, 3, 5, 7, 9, 11]  # GPT-2's tokens (and its EOS)
    judge_starts = clean_starts(spans, len(TEXT)).tolist()
    assert judge_starts == [0, 1, 2, 3, 5, 6, 7, 9, 10, 11]
    assert got.shared.tolist() == [[[True] * 6]] and got.matched.tolist() == [[True]]
    expected = [judge_starts.index(s) for s in starts]  # the judge's token at each shared boundary
    assert got.ids[0, 0].tolist() == [[2 * i, 2 * i + 1] for i in expected]
    assert torch.allclose(got.logps[0, 0], torch.tensor([[-0.2 * i, -(2 * i + 1) / 10] for i in expected]))
    other, _ = own_table(learner, [TEXT + "0"])  # a judgement of another text under the same keys: not used
    assert not teacher_distributions(other, {"tiny-sp": table}, ["tiny-sp"], rollouts_of(1, 1), 7, 2).matched.any()
    unfinished, _ = own_table(learner, [TEXT], finished=False)  # no EOS on either side: the text's 5 boundaries
    cut = RolloutBatch(prompt_id=["p0"], sample_index=[0], prompt_text=["q"], response_text=[TEXT],
                       response_token_ids=[theirs.ids], response_token_spans=[theirs.spans],
                       reward=np.zeros(1, np.float32), finished=[False], behaviour_logps=[[-1.0] * (n - 1)],
                       next_byte_ids=[ids[:-2]], next_byte_logps=[np.zeros(2 * n - 2, np.float32)]).to_table()
    got = teacher_distributions(unfinished, {"tiny-sp": cut}, ["tiny-sp"], rollouts_of(1, 1), 6, 2)
    assert got.shared.tolist() == [[[True] * 5 + [False]]]


@pytest.mark.slow  # builds a tiny trainer: over 2 s
def test_a_judges_published_distribution_is_its_direct_forward_summed_by_first_byte(grad_trainer, thl_tokenizers):
    """The judge (a tiny Mistral-SP model through the trainer's own forward) on the GPT-2 learner's text: before each of
    its tokens it publishes the ``k`` largest next-byte masses of its direct forward pass, by hand from the logits."""
    from mutualrl.regimes.core.judgements import judge_rollouts

    judge, k = grad_trainer, 3
    tokenizer = judge.processing_class
    own, _ = own_table(padded(thl_tokenizers["gpt2"]), [TEXT, " 40 + 2 = 42"])
    prompt = tokenizer("What is 12 - 5?", add_special_tokens=False)["input_ids"]
    output = {"prompt_ids": torch.tensor([prompt, prompt]), "prompt_mask": torch.ones(2, len(prompt), dtype=torch.long)}
    table = judge_rollouts(judge, output, rollouts_of(2, 2), {"tiny-bpe": own}, ["tiny-bpe"], top_bytes=k)
    table = table.records["tiny-bpe"].to_table()
    symbols = first_byte_symbols(tokenizer, judge.model.config.vocab_size)
    model = judge.model.eval()
    for row in range(2):
        ids = table.column("response_token_ids").to_pylist()[row]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + ids])).logits[0].double()[len(prompt) - 1: -1]  # [n, V]
        probs = torch.softmax(logits, -1)
        by_byte = torch.zeros(len(ids), SYMBOLS, dtype=torch.float64).index_add_(1, symbols, probs)  # [n, 258]
        top = torch.topk(by_byte, k, dim=-1)
        published = np.asarray(table.column("next_byte_ids").to_pylist()[row]).reshape(-1, k)
        masses = np.exp(np.asarray(table.column("next_byte_logps").to_pylist()[row])).reshape(-1, k)
        assert published.tolist() == top.indices.tolist()
        assert np.allclose(masses, top.values.numpy(), atol=1e-5)
        assert table.column("behaviour_logps").to_pylist()[row] == pytest.approx(
            torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None])[:, 0].tolist(), abs=1e-5)


# -- settings and saved state of the rescue ---------------------------------------------------------------------------
def test_a_checkpoint_saved_before_the_rescue_resumes_with_a_fresh_budget(tmp_path):
    """byte-kd's checkpoints of before its rescue hold ``"state": {}``: the launcher's reader accepts it and the
    adapter starts its counters at 0; damaged counters are still refused, and saved ones load."""
    import json

    from mutualrl.config import load_run_config
    from mutualrl.regimes.bytekd.adapter import ByteKDAdapter
    from mutualrl.regimes.core.state_file import (REGIME_STATE_FORMAT, REGIME_STATE_VERSION, RegimeStateError,
                                                  read_regime_state)

    path = tmp_path / "state.json"

    def saved(state):
        path.write_text(json.dumps({"format": REGIME_STATE_FORMAT, "version": REGIME_STATE_VERSION,
                                    "regime": "byte-kd", "policy": "tiny-sp", "step": 1, "state": state}))
        return read_regime_state(path, "byte-kd", "tiny-sp")

    config = load_run_config("tiny", regime="byte-kd", check_grpo=False).config
    adapter = ByteKDAdapter(config, "tiny-sp", exchange=None)
    adapter.rescues.rescues_total = 5
    adapter.load_state_dict(saved({}))
    assert adapter.state_dict() == {"rescues_total": 0, "rescues_by_prompt": {}}
    adapter.load_state_dict(saved({"rescues_total": 3, "rescues_by_prompt": {"p1": 2, "p0": 1}}))
    assert adapter.state_dict() == {"rescues_total": 3, "rescues_by_prompt": {"p0": 1, "p1": 2}}
    with pytest.raises(RegimeStateError, match="rescues_total"):
        saved({"rescues_total": -1})


def test_the_thresholds_order_is_checked_only_where_failures_count():
    """``failure_threshold`` (0.2 by default) is the rescue's and the blind-spot gate's: with neither, a success
    threshold below it is byte-kd's own business."""
    from mutualrl.config import load_run_config
    from mutualrl.config.typed import ConfigError

    low = ["regime.bytekd.success_threshold=0.1"]
    assert load_run_config("tiny", overrides=low, regime="byte-kd", check_grpo=False).config
    for failures_count in ("regime.bytekd.rescue_lam=0.3", "regime.bytekd.gate=blind-spot"):
        with pytest.raises(ConfigError, match="failure_threshold: must not exceed success_threshold"):
            load_run_config("tiny", overrides=[*low, failures_count], regime="byte-kd", check_grpo=False)

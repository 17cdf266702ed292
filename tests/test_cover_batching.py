"""The exact next-byte distributions batched equal them computed one state at a time (values and gradients).

byte-kd's ``distribution: exact`` scores every tokenization that covers a text (regimes/core/byte_covers.py). Its
forwards run batched (every text's sequences of a round in one right-padded forward, after prompts of unequal
length in TRL's left padding; the learner's gradient forward over the fewest sequences that hold every state), and
its sum over states runs vectorised per start offset. Checked here against the definition written as loops: each
state's next-token log-probs from its own unpadded forward, the cover sum one state at a time
(tests/bytekd_worlds.py), on texts of unequal length over a random tiny GPT-2 (absolute positions, so a position
shifted by padding would show) whose mass is spread over many tokenizations.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from bytekd_worlds import TableModel, per_state_next_byte_logps

from mutualrl.regimes.core.byte_covers import cover_next_byte_logps, find_covers
from mutualrl.regimes.core.cover_scoring import (CoverLimits, judge_next_bytes, learner_next_bytes_together,
                                                 model_forward, token_pieces)

TOLERANCE = 1e-5
"""float32: the batched forwards and the flat log-sum-exp add in another order than the loops. Seen: log q within
3.8e-6 (log-masses down to -40, where a float32 step is 3.8e-6), the gradient within 2.4e-6 of its largest entry; the
judge's side batched equals it text by text exactly."""


class Shim:
    """What the cover scoring reads of a trainer: the tokenizer, the stop ids, one rank, the model's logits (the
    trainer's ``completion_logits``: the last ``C + 1`` positions kept, the last dropped)."""

    def __init__(self, model, tokenizer):
        self.model, self.processing_class = model, tokenizer
        self.eos_token_ids = [tokenizer.eos_token_id]
        self.accelerator = SimpleNamespace(num_processes=1)

    def completion_logits(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask):
        ids = torch.cat([prompt_ids, completion_ids], 1)  # [N, P + C]
        mask = torch.cat([prompt_mask, completion_mask], 1)  # [N, P + C]
        logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=completion_ids.shape[1] + 1).logits
        return logits[:, :-1].float()  # [N, C, V]


def random_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    from mutualrl.assets.tokenizers import load_tokenizer

    tokenizer = load_tokenizer("gpt2")
    torch.manual_seed(3)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=64))
    return model.eval(), tokenizer


def left_padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])  # [N, P]
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])  # [N, P]
    return ids, mask


def test_the_vectorised_cover_sum_equals_the_loop_over_states_with_its_gradient():
    """Every sequence of a table model whose "12" is one token or two, and of one whose 3-byte character is whole or
    split: the same ``q`` at every offset and the same gradient of a loss on it."""
    for pieces, depth, seed in (([b"1", b"2", b"12", b""], 3, 1), ([b"\xe4", b"\xb8\x80", b"\xe4\xb8\x80", b"1", b""],
                                                                    2, 2)):
        model = TableModel(pieces, depth=depth, seed=seed)
        for tokens, _ in model.sequences():
            text = model.text_of(tokens)
            covers = find_covers(text, model.token_pieces, model.forward(), given=tokens)
            outs = []
            for score in (cover_next_byte_logps, per_state_next_byte_logps):
                theta = model.theta.clone().requires_grad_(True)
                states = [model.logps(state, theta) for state in covers.tokens]  # [V] each
                logq = score(covers, text, model.token_pieces, torch.stack(states) if score is cover_next_byte_logps
                             else states)  # [O, 258]
                finite = torch.isfinite(logq)
                (grad,) = torch.autograd.grad((logq[finite].exp() * logq[finite]).sum(), theta)
                outs.append((logq.detach(), finite, grad))
            (fast, finite, grad), (slow, finite_ref, grad_ref) = outs
            assert torch.equal(finite, finite_ref), tokens
            assert (fast[finite] - slow[finite]).abs().max() < 1e-6, tokens
            assert (grad - grad_ref).abs().max() < 1e-6, tokens


@pytest.mark.slow  # GPT-2's byte table, ~40 forwards over its 50k vocabulary and their gradient: 65 s on the
# shared 2-core box at load 12, half of it importing GPT-2's module and building the byte table
def test_batched_cover_forwards_equal_each_state_forwarded_alone_on_rows_of_unequal_length():
    model, tokenizer = random_gpt2()
    shim = Shim(model, tokenizer)
    pieces = token_pieces(shim, model.config.vocab_size)
    prompt_ids, prompt_mask = left_padded([tokenizer.encode("1+2="), tokenizer.encode("12+34+56=")],
                                          tokenizer.eos_token_id)
    given = [tokenizer.encode(" 12 apples"), tokenizer.encode("46")]
    texts = [pieces.text_of(tokens) for tokens in given]
    limits = CoverLimits(1e-3, 4)

    learned, _ = learner_next_bytes_together(shim, model, prompt_ids, prompt_mask, texts, given, pieces, limits)
    loss = sum((logq[torch.isfinite(logq)].exp() * logq[torch.isfinite(logq)]).sum() for logq, _ in learned)
    grads = torch.autograd.grad(loss, list(model.parameters()))

    reference, judged = [], judge_next_bytes(shim, prompt_ids, prompt_mask, texts, given, 4, limits)
    for row, (text, (logq, covers)) in enumerate(zip(texts, learned, strict=True)):
        alone = []  # each state's next-token log-probs, its own forward, no padding after the prompt
        for state in covers.tokens:
            ids = torch.cat([prompt_ids[row], torch.tensor(state, dtype=torch.long)])[None]  # [1, P + t]
            mask = torch.cat([prompt_mask[row], torch.ones(len(state), dtype=torch.long)])[None]  # [1, P + t]
            alone.append(torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits[0, -1].float(), -1))
        slow = per_state_next_byte_logps(covers, text, pieces, alone)  # [O, 258]
        finite = torch.isfinite(slow)
        assert torch.equal(torch.isfinite(logq), finite) and len(covers.tokens) > len(given[row]) + 1
        assert (logq.detach()[finite] - slow.detach()[finite]).abs().max() < TOLERANCE, row
        reference.append((slow[finite].exp() * slow[finite]).sum())
        with torch.no_grad():  # the judge's side: each text's enumeration alone, one forward per round
            own = find_covers(text, pieces, model_forward(shim, model, prompt_ids[row], prompt_mask[row]), given[row],
                              limits.floor, limits.max_states)
            alone_q = cover_next_byte_logps(own, text, pieces).clamp(min=torch.finfo(torch.float32).min)  # [O, 258]
        top = torch.topk(alone_q, k=4, dim=-1).values  # [O, 4]
        at_judged = alone_q.gather(-1, judged[0][row].long())  # [O, 4] the judged symbols' mass alone
        assert own.tokens == covers.tokens
        assert (judged[1][row] - top).abs().max() < TOLERANCE and (judged[1][row] - at_judged).abs().max() < TOLERANCE
    grads_ref = torch.autograd.grad(sum(reference), list(model.parameters()))
    for grad, grad_ref in zip(grads, grads_ref, strict=True):
        assert (grad - grad_ref).abs().max() <= TOLERANCE * max(1.0, float(grad_ref.abs().max()))

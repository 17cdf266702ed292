"""On a CPU, TRL's fused LM head projects only the labelled positions (and fillers up to ``MIN_ROWS``): the same
log-probs, entropies and gradients into every trainable weight as TRL's CPU path, bit for bit, whether the head
trains or is frozen, on ordinary batches and on batches of one labelled token."""

from __future__ import annotations

import pytest
import torch
import trl.trainer.utils as trl_utils
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
from trl.kernels import ChunkedLogProbFunction
from trl.trainer.utils import add_fused_lm_head

from mutualrl.host.cpu_lm_head import MIN_ROWS, LabelledRowsLogProb, rows_to_score, score_labelled_rows_only_on_cpu


@pytest.fixture
def projected_rows(monkeypatch):
    """TRL's function restored after the test (the switch is process-wide, as it is in a worker); the number of
    rows each call projects through the head."""
    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", trl_utils._ChunkedLogProbFunction)
    rows: list[int] = []
    trl_forward = ChunkedLogProbFunction.forward

    def counted(ctx, hidden, *rest):
        rows.append(hidden.shape[0])
        return trl_forward(ctx, hidden, *rest)

    monkeypatch.setattr(ChunkedLogProbFunction, "forward", staticmethod(counted))
    return rows


def full_model(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)  # tied embeddings: the head trains
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))  # as GRPOTrainer does
    return model


def lora_policy(folder):
    base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    base.config.tie_word_embeddings = False  # a head of its own, as the real pools' LoRA policies may have
    add_fused_lm_head(base, outputs=("log_probs", "entropy"))  # as GRPOTrainer does, before PEFT
    return get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))


def batch(vocab: int, rows: int = 4, prompt: int = 12, completion: int = 6, labelled: int | None = None):
    """Left-padded prompts and completions, labels -100 on prompt and padding, as TRL's GRPO builds them."""
    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (rows, prompt + completion))  # [B, P+C]
    attention = torch.ones_like(ids)  # [B, P+C]
    if rows > 2:
        attention[1, :3] = 0  # a shorter prompt, left-padded
        attention[2, -2:] = 0  # a completion that stopped early
    labels = ids.masked_fill(attention == 0, -100)  # [B, P+C]
    labels[:, :prompt] = -100
    if labelled is not None:  # keep only the first `labelled` labelled positions
        keep = (labels != -100).flatten().nonzero()[:labelled]  # [labelled, 1]
        only = torch.full_like(labels, -100).flatten()  # [B*(P+C)]
        only[keep] = labels.flatten()[keep]
        labels = only.view_as(labels)  # [B, P+C]
    return ids, attention, labels


def score(model, ids, attention, labels):
    model.zero_grad()
    torch.manual_seed(1)
    advantages = torch.randn(ids.shape[0], 1)  # [B, 1]: signs mixed, as GRPO's
    out = model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
    ((out.log_probs * advantages).sum() + 0.1 * out.entropy.sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return out.log_probs.detach().clone(), out.entropy.detach().clone(), grads


def assert_bit_for_bit(trl, ours):
    assert torch.equal(trl[0], ours[0]) and torch.equal(trl[1], ours[1])
    assert trl[2].keys() == ours[2].keys() and trl[2]
    different = [n for n in trl[2] if not torch.equal(trl[2][n], ours[2][n])]
    assert not different, different


@pytest.mark.parametrize("pair, make, rows", [("bpe", full_model, 8), ("sp", full_model, 8), ("bpe", lora_policy, 4)])
def test_trls_numbers_bit_for_bit_from_the_labelled_positions(random_lm_pair, projected_rows, pair, make, rows):
    model = make(random_lm_pair[pair])
    ids, attention, labels = batch(model.config.vocab_size, rows=rows)
    trl = score(model, ids, attention, labels)
    assert score_labelled_rows_only_on_cpu(model) and trl_utils._ChunkedLogProbFunction is LabelledRowsLogProb
    ours = score(model, ids, attention, labels)
    positions, labelled = rows * 17, int((labels[:, 1:] != -100).sum())
    assert projected_rows == [positions, max(labelled, MIN_ROWS)] and labelled < positions / 2
    assert_bit_for_bit(trl, ours)
    head = model.get_output_embeddings().weight
    assert head.requires_grad == (make is full_model)  # a head that trains, and one that does not


def test_one_labelled_token_is_projected_among_fillers_and_keeps_trls_bits(random_lm_pair, projected_rows):
    """A product over one row takes another kernel than one over every position (its last bits differ): the row
    goes through with unlabelled ones up to MIN_ROWS."""
    model = full_model(random_lm_pair["bpe"])
    ids, attention, labels = batch(model.config.vocab_size, labelled=1)
    trl = score(model, ids, attention, labels)
    score_labelled_rows_only_on_cpu(model)
    ours = score(model, ids, attention, labels)
    assert projected_rows == [4 * 17, MIN_ROWS]
    assert_bit_for_bit(trl, ours)


def test_where_every_position_would_be_projected_it_is_trls_function(random_lm_pair, projected_rows):
    model = full_model(random_lm_pair["sp"])
    ids, attention, labels = batch(model.config.vocab_size, rows=1, prompt=4, completion=6)  # 9 positions
    trl = score(model, ids, attention, labels)
    score_labelled_rows_only_on_cpu(model)
    ours = score(model, ids, attention, labels)
    assert projected_rows == [9, 9]
    assert_bit_for_bit(trl, ours)


def test_a_model_it_did_not_wrap_keeps_trls_path(random_lm_pair, projected_rows):
    """The function is process-wide; only a wrapped model's forward says which positions carry a label."""
    assert score_labelled_rows_only_on_cpu(full_model(random_lm_pair["bpe"]))
    plain = full_model(random_lm_pair["bpe"])
    ids, attention, labels = batch(plain.config.vocab_size)
    with torch.no_grad():
        plain(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
    assert projected_rows == [4 * 17]


def test_wrapping_twice_wraps_once(random_lm_pair, projected_rows):
    model = lora_policy(random_lm_pair["sp"])
    assert score_labelled_rows_only_on_cpu(model) and score_labelled_rows_only_on_cpu(model)
    forward = model.get_base_model().forward
    assert forward._mutualrl_labelled_rows and not getattr(forward.__wrapped__, "_mutualrl_labelled_rows", False)


def test_rows_to_score_keeps_every_labelled_position_in_order_and_fills_up_to_the_minimum():
    labelled = torch.zeros(100, dtype=torch.bool)
    labelled[[3, 50, 97]] = True
    rows = rows_to_score(labelled)
    assert rows.tolist() == sorted(rows.tolist()) and len(rows) == MIN_ROWS
    assert {3, 50, 97} <= set(rows.tolist())
    labelled[:60] = True
    assert rows_to_score(labelled).tolist() == list(range(60)) + [97]
    assert rows_to_score(torch.ones(10, dtype=torch.bool)) is None  # every position: TRL's function
    assert rows_to_score(torch.zeros(MIN_ROWS, dtype=torch.bool)) is None

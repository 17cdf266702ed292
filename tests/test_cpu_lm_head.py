"""On a CPU, TRL's fused LM head projects only the labelled positions (and fillers up to a multiple of
``ROW_MULTIPLE``, ``MIN_ROWS`` at least): the same log-probs, entropies and gradients into every trainable weight as
TRL's CPU path, bit for bit, whether the head trains or is frozen, on ordinary batches, on batches of one labelled
token, and with the many threads under which MKL splits a product by its row count."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
import trl.trainer.utils as trl_utils
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
from trl.kernels import ChunkedLogProbFunction
from trl.trainer.utils import add_fused_lm_head

from mutualrl.host.trl_cpu_lm_head_patch import (
    MIN_ROWS,
    ROW_MULTIPLE,
    LabelledRowsLogProb,
    rows_to_score,
    score_labelled_rows_only_on_cpu,
)


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


def scored_count(labelled: int) -> int:
    return max(MIN_ROWS, -(-labelled // ROW_MULTIPLE) * ROW_MULTIPLE)


def assert_bit_for_bit(trl, ours):
    assert torch.equal(trl[0], ours[0]) and torch.equal(trl[1], ours[1])
    assert trl[2].keys() == ours[2].keys() and trl[2]
    different = [n for n in trl[2] if not torch.equal(trl[2][n], ours[2][n])]
    assert not different, different


@pytest.mark.slow  # over 2 s: outside the fast tier
@pytest.mark.parametrize("pair, make, rows", [("bpe", full_model, 8), ("sp", full_model, 8), ("bpe", lora_policy, 4)])
def test_trls_numbers_bit_for_bit_from_the_labelled_positions(random_lm_pair, projected_rows, pair, make, rows):
    model = make(random_lm_pair[pair])
    ids, attention, labels = batch(model.config.vocab_size, rows=rows)
    trl = score(model, ids, attention, labels)
    assert score_labelled_rows_only_on_cpu(model) and trl_utils._ChunkedLogProbFunction is LabelledRowsLogProb
    ours = score(model, ids, attention, labels)
    positions, labelled = rows * 17, int((labels[:, 1:] != -100).sum())
    assert projected_rows == [positions, scored_count(labelled)] and labelled < positions / 2
    assert_bit_for_bit(trl, ours)
    head = model.get_output_embeddings().weight
    assert head.requires_grad == (make is full_model)  # a head that trains, and one that does not


@pytest.mark.slow  # over 2 s: outside the fast tier
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


@pytest.mark.parametrize("labelled", [37, 49])
def test_many_threads_keep_trls_bits(random_lm_pair, projected_rows, labelled):
    """With 24 threads MKL gave rows of a 37- or 49-row product other last bits than the product over every position
    (measured); multiples of ROW_MULTIPLE did not."""
    model = full_model(random_lm_pair["bpe"])
    ids, attention, labels = batch(model.config.vocab_size, rows=12, labelled=labelled)
    threads = torch.get_num_threads()
    torch.set_num_threads(24)
    try:
        trl = score(model, ids, attention, labels)
        score_labelled_rows_only_on_cpu(model)
        ours = score(model, ids, attention, labels)
    finally:
        torch.set_num_threads(threads)
    assert projected_rows == [12 * 17, scored_count(labelled)]
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


def test_wrapping_twice_wraps_once_and_keeps_the_forwards_signature(random_lm_pair, projected_rows):
    model = lora_policy(random_lm_pair["sp"])
    assert score_labelled_rows_only_on_cpu(model)
    base = model.get_base_model()
    wrapped, trls = base.forward.__func__, base._mutualrl_fused_forward
    assert score_labelled_rows_only_on_cpu(model)
    assert base.forward.__func__ is wrapped and base._mutualrl_fused_forward is trls
    assert "input_ids" in inspect.signature(base.forward).parameters  # what generate() checks its kwargs against
    ids = torch.randint(0, model.config.vocab_size, (1, 4))  # [1, 4]
    assert model.generate(input_ids=ids, max_new_tokens=2, do_sample=False).shape == (1, 6)


def test_a_deep_copy_runs_its_own_weights(random_lm_pair, projected_rows):
    """Both forwards are bound to the model, so a copy's are bound to the copy (as TRL binds its own)."""
    model = full_model(random_lm_pair["bpe"])
    score_labelled_rows_only_on_cpu(model)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.get_output_embeddings().weight.mul_(2.0)
    ids, attention, labels = batch(model.config.vocab_size)
    with torch.no_grad():
        own, other = (m(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True).log_probs
                      for m in (model, twin))
    assert not torch.equal(own, other)
    assert projected_rows == [MIN_ROWS, MIN_ROWS]  # both through the labelled rows


def test_rows_to_score_keeps_every_labelled_position_in_order_and_fills_up_to_the_minimum():
    labelled = torch.zeros(100, dtype=torch.bool)
    labelled[[3, 50, 97]] = True
    rows = rows_to_score(labelled)
    assert rows.tolist() == sorted(rows.tolist()) and len(rows) == MIN_ROWS
    assert {3, 50, 97} <= set(rows.tolist())
    labelled[:60] = True  # 61 labelled: 64 rows, the first three unlabelled ones fill up
    assert rows_to_score(labelled).tolist() == list(range(63)) + [97]
    assert rows_to_score(torch.ones(10, dtype=torch.bool)) is None  # every position: TRL's function
    assert rows_to_score(torch.zeros(MIN_ROWS, dtype=torch.bool)) is None
    assert rows_to_score(torch.zeros(5000, dtype=torch.bool)) is None  # TRL would split it into token chunks

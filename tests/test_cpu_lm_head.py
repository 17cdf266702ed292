"""On a CPU, TRL's fused LM head scores only the completion positions where the head is frozen: the same log-probs
and the same gradients into every trainable weight, bit for bit on an ordinary batch, from fewer rows (issue 40);
a batch of one or two labelled tokens only to float rounding."""

from __future__ import annotations

import pytest
import torch
import trl.trainer.utils as trl_utils
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
from trl.trainer.utils import add_fused_lm_head

from mutualrl.host.cpu_lm_head import compact_on_cpu, score_completions_only_on_cpu


@pytest.fixture
def trl_choice(monkeypatch):
    """TRL's own choice restored after the test (the switch is process-wide, as it is in a worker)."""
    monkeypatch.setattr(trl_utils, "_use_triton", trl_utils._use_triton)


def lora_policy(folder):
    base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    base.config.tie_word_embeddings = False  # a head of its own, as the real pools' LoRA policies may have
    add_fused_lm_head(base, outputs=("log_probs", "entropy"))  # as GRPOTrainer does, before PEFT
    return get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))


def batch(vocab: int, prompt: int = 12, completion: int = 6, labelled: int | None = None):
    """Left-padded prompts and completions, labels -100 on prompt and padding, as TRL's GRPO builds them."""
    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (4, prompt + completion))  # [B, P+C]
    attention = torch.ones_like(ids)  # [B, P+C]
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
    out = model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
    (out.log_probs.sum() + out.entropy.sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return out.log_probs.detach().clone(), out.entropy.detach().clone(), grads


def test_a_lora_policy_gets_trls_numbers_bit_for_bit_from_the_completion_rows_only(random_lm_pair, trl_choice,
                                                                                   monkeypatch):
    model = lora_policy(random_lm_pair["bpe"])
    ids, attention, labels = batch(model.config.vocab_size)
    rows = []
    chunked = trl_utils._ChunkedLogProbFunction.apply
    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply",
                        lambda hidden, *rest: rows.append(hidden.shape[0]) or chunked(hidden, *rest))
    assert not trl_utils._use_triton(torch.device("cpu"))  # TRL on a CPU: every position
    full = score(model, ids, attention, labels)
    assert score_completions_only_on_cpu(model) and trl_utils._use_triton is compact_on_cpu
    compact = score(model, ids, attention, labels)
    assert rows == [4 * 17, int((labels[:, 1:] != -100).sum())]  # 68 positions scored, then the 22 labelled
    assert torch.equal(full[0], compact[0]) and torch.equal(full[1], compact[1])
    assert full[2].keys() == compact[2].keys() and full[2] and all(n.count("lora_") for n in full[2])
    assert all(torch.equal(full[2][n], compact[2][n]) for n in full[2])


def test_a_trained_head_keeps_trls_choice(random_lm_pair, trl_choice):
    """Its weight's gradient would sum fewer rows in another order (last bits differ): TRL's path is kept."""
    assert score_completions_only_on_cpu(lora_policy(random_lm_pair["sp"]))  # an earlier trainer in this process
    model = AutoModelForCausalLM.from_pretrained(random_lm_pair["sp"], dtype=torch.float32)
    assert not score_completions_only_on_cpu(model)
    assert not trl_utils._use_triton(torch.device("cpu"))


def test_a_batch_of_one_labelled_token_agrees_to_float_rounding(random_lm_pair, trl_choice):
    """An fp32 product over one row rounds differently from one over every position: equal to rounding, not bits."""
    model = lora_policy(random_lm_pair["bpe"])
    ids, attention, labels = batch(model.config.vocab_size, labelled=1)
    full = score(model, ids, attention, labels)
    score_completions_only_on_cpu(model)
    compact = score(model, ids, attention, labels)
    assert int((labels[:, 1:] != -100).sum()) == 1
    assert torch.allclose(full[0], compact[0], rtol=1e-5, atol=1e-6)
    for name, grad in full[2].items():  # ~1e-5 of the largest entry, measured
        assert (grad - compact[2][name]).abs().max() <= 1e-4 * grad.abs().max(), name

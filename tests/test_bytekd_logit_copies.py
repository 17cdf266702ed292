"""byte-kd's full-logit term holds no more than the plan counts (``FULL_LOGIT_COPIES`` float32 tensors a logit at its
peak): the model's bf16 logits become one float32 copy divided in place (``tempered_logits``), not a float32 copy and
a second tempered one beside the bf16 logits (10 bytes a logit, measured on a GPU). Live bytes are counted op by op
below autograd, each storage once, from its first tensor to its last."""

from __future__ import annotations

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from mutualrl.launch.plan.bounds import FULL_LOGIT_COPIES
from mutualrl.regimes.core import next_bytes
from mutualrl.regimes.core.next_bytes import next_byte_logps, tempered_logits


class LiveBytes(TorchDispatchMode):
    """The bytes of the storages of at least ``floor`` bytes that ops made and some tensor still holds, and their
    peak."""

    def __init__(self, floor: int = 0) -> None:
        super().__init__()
        self.floor = floor
        self.holders: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.now = self.peak = 0

    def _release(self, key: int) -> None:
        self.holders[key] -= 1
        if self.holders[key] == 0:
            self.now -= self.sizes.pop(key)
            del self.holders[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().nbytes() >= self.floor:
                key = tensor.untyped_storage().data_ptr()
                if key not in self.holders:
                    self.holders[key], self.sizes[key] = 0, tensor.untyped_storage().nbytes()
                    self.now += self.sizes[key]
                    self.peak = max(self.peak, self.now)
                self.holders[key] += 1
                weakref.finalize(tensor, self._release, key)
        return out


ROWS, COMPLETION, VOCAB, WIDTH = 2, 32, 2000, 8


def measure(temper, monkeypatch) -> tuple[float, float]:
    """(forward peak above the bf16 logits, whole peak) in bytes a logit of: bf16 logits from a head, ``temper``ed,
    byte log-masses, backward. Only logit-sized storages count (a byte a logit or more: the ``[rows, completion,
    vocabulary]`` tensors), as the plan's ``FULL_LOGIT_COPIES`` does; the log-masses work 8 rows at a time, as a real
    vocabulary's 110 rows of 8,192, so a chunk's tensors stay below that."""
    monkeypatch.setattr(next_bytes, "ROWS_PER_CHUNK_ELEMENTS", 8 * VOCAB)
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(ROWS, COMPLETION + 1, WIDTH, generator=generator, requires_grad=True)  # [R, C + 1, H]
    head = torch.randn(VOCAB, WIDTH, generator=generator).bfloat16()  # [V, H]
    symbols = torch.randint(0, 256, (VOCAB,), generator=generator)  # [V]
    logits_count = ROWS * COMPLETION * VOCAB
    with LiveBytes(floor=ROWS * COMPLETION * VOCAB) as live:
        logits = hidden.bfloat16() @ head.T  # [R, C + 1, V] bf16, as the model returns them under autocast
        held = live.now
        tempered = temper(logits[:, :-1, :], 0.7)  # [R, C, V] float32
        forward = live.peak - held
        logq = next_byte_logps(tempered, symbols)  # [R, C, 258]
        del logits, tempered  # as in the adapter: only autograd holds them at the backward
        logq.sum().backward()
    return forward / logits_count, live.peak / logits_count


@pytest.mark.slow  # a dispatch mode's first use sets up torch's Python dispatch: ~4 s of CPU
def test_the_tempered_logits_are_one_float32_copy_and_the_peak_is_what_the_plan_counts(monkeypatch):
    forward, peak = measure(tempered_logits, monkeypatch)
    assert forward == pytest.approx(4, rel=0.01)  # one float32 copy beside the bf16 logits: 6 bytes with them
    assert peak == pytest.approx(4 * FULL_LOGIT_COPIES, rel=0.01)  # at the backward: the kept logits, their gradient
    before, _ = measure(lambda logits, t: logits.float() / t, monkeypatch)
    assert before == pytest.approx(4 + 4, rel=0.01)  # two beside the bf16 logits: the 10 bytes a GPU measured


def test_the_in_place_division_has_the_composed_gradient():
    logits = torch.randn(3, 5, 40, dtype=torch.bfloat16)  # [R, C, V]
    symbols = torch.randint(0, 256, (40,))  # [V]
    grads = []
    for temper in (tempered_logits, lambda z, t: z.float() / t):
        leaf = logits.clone().requires_grad_(True)
        next_byte_logps(temper(leaf, 0.7), symbols).exp().sum().backward()
        grads.append(leaf.grad.float())
    torch.testing.assert_close(grads[0], grads[1])
    assert tempered_logits(logits, 1.0).dtype == torch.float32 and tempered_logits(logits, 1.0).data_ptr() != \
        logits.data_ptr()

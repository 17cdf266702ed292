"""On a CPU, TRL's fused LM head scores only the completion tokens, as it does on a GPU, where that changes no number.

TRL 1.16's ``add_fused_lm_head`` (``trl/trainer/utils.py``) projects through the LM head only the positions whose
label is not -100 when ``_use_triton(device)`` holds; on any other device it scores every position of the padded
sequence, prompt and padding included, because "the number of valid positions would change the tile shapes on
every batch and trigger a recompilation" (Neuron). A CPU runs eager kernels and compiles nothing, so there that
is only wasted work: Gemma-3-270M's 262k-row head over prompt and padding positions was 69% of its FLOPs in a
``smol-arith`` step (benchmarks/results/step-profile.md).

Each position's log-probability comes from the same vocabulary tiles either way, and so does the gradient into
the hidden states, as long as the matrix products keep their blocking: the head weight's own gradient sums
another number of (zero) rows in another order, so the switch is made only where the head is frozen (LoRA, and
any policy whose head does not train). Then the numbers are TRL's own bit for bit on ordinary batches (a
``smol-arith`` run: the same metrics and byte-identical adapters; ``tests/test_cpu_lm_head.py``); a micro-batch
with only one or two labelled tokens can differ in the last bits (fp32 products over one or two rows round
differently from products over all positions), in about half the forward and backward time.
``trl.trainer.utils`` imports ``_use_triton`` into its own namespace and asks it only for that choice; the
kernels keep their own (``trl/kernels/chunked_logprob.py``), so the CPU tiles stay the CPU tiles.
"""

from __future__ import annotations

from typing import Any

import trl.trainer.utils as trl_utils

_trl_use_triton = trl_utils._use_triton


def compact_on_cpu(device: Any) -> bool:
    """``add_fused_lm_head``'s choice: score only the labelled positions on a CPU too (elsewhere: TRL's own)."""
    return device.type == "cpu" or _trl_use_triton(device)


def head_is_frozen(model: Any) -> bool:
    head = model.get_output_embeddings()
    return head is not None and not head.weight.requires_grad


def score_completions_only_on_cpu(model: Any) -> bool:
    """Make this process's fused LM heads score only labelled positions on a CPU if ``model`` (the policy being
    trained, PEFT-wrapped or not) has a frozen head, else TRL's own choice again (the choice is process-wide: a
    worker trains one policy; in one process, the latest trainer's model decides); whether it did."""
    frozen = head_is_frozen(model)
    trl_utils._use_triton = compact_on_cpu if frozen else _trl_use_triton
    return frozen

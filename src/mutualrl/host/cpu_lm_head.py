"""On a CPU, TRL's fused LM head scores only the labelled positions, with TRL's own CPU numbers bit for bit.

TRL 1.16's ``add_fused_lm_head`` (``trl/trainer/utils.py``) projects through the LM head only the positions whose
label is not -100 when ``_use_triton(device)`` holds; on any other device it scores every position of the padded
sequence, prompt and padding included, because "the number of valid positions would change the tile shapes on
every batch and trigger a recompilation" (Neuron). A CPU runs eager kernels and compiles nothing, so there that
is wasted work: Gemma-3-270M's 262k-row head over prompt and padding positions was 69% of its FLOPs in a
``smol-arith`` step, and the tiny models are nearly all LM head (benchmarks/results/step-profile.md).

TRL's own compact path (``_use_triton`` made true) would not give TRL's CPU numbers, for two reasons, both measured
(``tests/test_cpu_lm_head.py``):

- a matrix product over one to a few rows takes another kernel than one over every position (MKL; on a 2-core AVX2
  box under 12 rows with two threads): the row's log-prob and its gradient into the hidden state differ in the last
  bits. Products over :data:`MIN_ROWS` rows or more give every row exactly what the product over every position
  gives it, so at least that many are scored: unlabelled positions fill up the count, and their results are dropped;
- the head weight's gradient is a sum over the rows, and its blocking depends on their number: over fewer rows it
  rounds differently. It is formed as TRL's CPU path forms it, over every position, from a tile that holds zeros
  in the rows of unlabelled positions, which is what TRL's path has there (a zero log-prob gradient).

So a policy with a frozen head (LoRA) saves the head's whole cost on the unlabelled positions, and one whose head
trains all but its weight-gradient product. The log-prob function is TRL's (``trl/kernels/chunked_logprob.py``),
given the labelled rows; its backward is TRL's loop with the weight gradient formed as above. Which positions carry
a label is read in the model's forward (:func:`score_labelled_rows_only_on_cpu` wraps it), as TRL's forward
reads it. On a GPU nothing changes: TRL's Triton path already scores the labelled positions only.
"""

from __future__ import annotations

import functools
from contextvars import ContextVar
from typing import Any

import torch
import trl.trainer.utils as trl_utils
from trl.kernels import chunked_logprob as kernels

#: Fewest rows a projection is given (labelled ones first, then unlabelled ones): on fewer, the product's kernel can
#: change and the last bits with it (under 12 rows on the 2-core AVX2 box; 32 leaves room for other CPUs).
MIN_ROWS = 32

_labelled: ContextVar[torch.Tensor | None] = ContextVar("mutualrl_labelled_positions", default=None)


def rows_to_score(labelled: torch.Tensor) -> torch.Tensor | None:
    """The positions to project, in order: every labelled one, and unlabelled ones up to :data:`MIN_ROWS`; ``None``
    where that would be every position, or where TRL would split the positions into token chunks."""
    total = labelled.numel()
    count = int(labelled.sum())
    wanted = max(count, min(MIN_ROWS, total))
    if wanted == total or total > kernels.TOKEN_CHUNK_SIZE:
        return None
    filler = (~labelled).nonzero().squeeze(1)[: wanted - count]  # [wanted - count]
    return torch.cat([labelled.nonzero().squeeze(1), filler]).sort().values  # [wanted]


class LabelledRowsLogProb(kernels.ChunkedLogProbFunction):
    """TRL's ``ChunkedLogProbFunction`` over the rows :func:`rows_to_score` picks; the other rows' outputs are 0 (TRL's
    forward masks them to 0) and get no gradient. Without a labelled-position mask it is TRL's function."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk_size, final_logit_softcapping=None,
                logit_scale=1.0, outputs=kernels.OPTIONAL_OUTPUTS):
        labelled = _labelled.get()
        rows = None
        if labelled is not None and labelled.numel() == hidden.shape[0]:
            rows = rows_to_score(labelled.to(hidden.device))
        ctx.rows, ctx.positions = rows, hidden.shape[0]
        if rows is None:
            return kernels.ChunkedLogProbFunction.forward(ctx, hidden, weight, bias, targets, temperature, chunk_size,
                                                          final_logit_softcapping, logit_scale, outputs)
        scored = kernels.ChunkedLogProbFunction.forward(ctx, hidden[rows], weight, bias, targets[rows], temperature,
                                                        chunk_size, final_logit_softcapping, logit_scale, outputs)
        every = tuple(None if x is None else x.new_zeros(ctx.positions).index_copy_(0, rows, x)  # [N] each
                      for x in scored)
        ctx.mark_non_differentiable(*(x for x in every[2:] if x is not None))  # as TRL marks its own
        return every

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy, *_):  # type: ignore[override]
        if ctx.rows is None:
            return kernels.ChunkedLogProbFunction.backward(ctx, grad_logprobs, grad_entropy)
        rows = ctx.rows
        hidden, weight, bias, targets, log_z, entropy = ctx.saved_tensors  # the scored rows' (weight, bias: all)
        needs_hidden, needs_weight, needs_bias = ctx.needs_input_grad[:3]
        grad_logprobs = None if grad_logprobs is None else grad_logprobs[rows].float().contiguous()  # [M]
        grad_entropy = None if grad_entropy is None else grad_entropy[rows].float().contiguous()  # [M]
        with trl_utils.maybe_gather_lm_head_ctx(weight, bias):
            grad_hidden = torch.zeros(hidden.shape, device=hidden.device, dtype=torch.float32)  # [M, H]
            grad_weight = torch.zeros(weight.shape, device=weight.device, dtype=torch.float32) if needs_weight else None
            grad_bias = torch.zeros(bias.shape, device=bias.device, dtype=torch.float32) if needs_bias else None
            scored = hidden.to(ctx.compute_dtype)  # [M, H]
            # TRL's CPU path's rows for the weight's gradient: every position, zero where none is scored.
            every = scored.new_zeros((ctx.positions, scored.shape[1])).index_copy_(0, rows, scored)  # [N, H]
            tile_buf = torch.empty((len(rows), ctx.chunk_size), device=hidden.device, dtype=ctx.compute_dtype)
            every_buf = torch.zeros((ctx.positions, ctx.chunk_size), device=hidden.device, dtype=ctx.compute_dtype)
            for start in range(0, weight.shape[0], ctx.chunk_size):
                end = min(start + ctx.chunk_size, weight.shape[0])
                w_chunk = weight[start:end].to(ctx.compute_dtype)  # [V_c, H]
                tile = tile_buf[:, : end - start]  # [M, V_c]: TRL's buffer layout
                torch.mm(scored, w_chunk.t(), out=tile)
                if bias is not None:
                    tile.add_(bias[start:end].to(ctx.compute_dtype))
                kernels._backward_tile(
                    tile, tile.stride(0), targets, log_z, entropy,
                    grad_logprobs if grad_logprobs is not None else log_z,
                    grad_entropy if grad_entropy is not None else log_z,
                    start, end - start, HAS_LOGPROB_GRAD=grad_logprobs is not None,
                    HAS_ENTROPY_GRAD=grad_entropy is not None, BLOCK_SIZE=kernels._BLOCK_SIZE, **ctx.kernel_args,
                )  # tile: the logits' gradient, in place
                if needs_hidden:
                    kernels._addmm_fp32(grad_hidden, tile, w_chunk)
                if grad_weight is None and grad_bias is None:
                    continue
                padded = every_buf[:, : end - start].index_copy_(0, rows, tile)  # [N, V_c]: zeros elsewhere
                if grad_weight is not None:
                    kernels._addmm_fp32(grad_weight[start:end], padded.t(), every)
                if grad_bias is not None:
                    grad_bias[start:end] += padded.sum(dim=0, dtype=torch.float32)
        grad_every = None
        if needs_hidden:
            grad_every = grad_hidden.new_zeros((ctx.positions, hidden.shape[1])).index_copy_(0, rows, grad_hidden)
            grad_every = grad_every.to(hidden.dtype)  # [N, H]
        return (grad_every, None if grad_weight is None else grad_weight.to(weight.dtype),
                None if grad_bias is None else grad_bias.to(bias.dtype), None, None, None, None, None, None)


def _patched_model(model: Any) -> Any:
    """The module whose ``forward`` TRL's ``add_fused_lm_head`` replaced (under PEFT, the base model)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def score_labelled_rows_only_on_cpu(model: Any) -> bool:
    """Make ``model``'s fused LM head (TRL's ``add_fused_lm_head``, PEFT-wrapped or not) project only the labelled
    positions where the model is on a CPU; whether it does. Process-wide: TRL's log-prob function is replaced by
    :class:`LabelledRowsLogProb`, which is TRL's own for any model this did not wrap."""
    base = _patched_model(model)
    if next(base.parameters()).device.type != "cpu" or getattr(base.forward, "_mutualrl_labelled_rows", False):
        return next(base.parameters()).device.type == "cpu"
    fused = base.forward

    @functools.wraps(fused)
    def forward(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("fused_lm_head"):
            return fused(*args, **kwargs)
        shifted = kwargs.get("shift_labels")
        labels = kwargs["labels"][:, 1:] if shifted is None else shifted  # as TRL's forward reads them
        token = _labelled.set((labels != -100).reshape(-1))  # [N]
        try:
            return fused(*args, **kwargs)
        finally:
            _labelled.reset(token)

    forward._mutualrl_labelled_rows = True  # type: ignore[attr-defined]
    base.forward = forward
    trl_utils._ChunkedLogProbFunction = LabelledRowsLogProb
    return True

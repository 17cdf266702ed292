"""In-process timers for ``benchmarks/step_profile.py``, loaded into each policy process of a real run.

Why a hook and not new instrumentation in ``src/``: the profile must be of the unchanged trainer. The
driver puts a ``sitecustomize.py`` on the policies' ``PYTHONPATH`` that calls :func:`install` when
``MUTUALRL_STEP_PROFILE_OUT`` is set. :func:`install` waits (an import hook) until the worker imports
``mutualrl.training.trainer`` -- after the worker has decided on vLLM, so importing TRL early changes
nothing -- and then wraps, on the class ``MutualGRPOTrainer``:

- ``training_step`` and ``_prepare_inputs``: forward+backward = training_step - _prepare_inputs
  (Trainer calls ``_prepare_inputs`` inside ``training_step``; GRPO generates there). Under ``see.catch_up``
  the worker's ``CatchUpTrainer`` decides each round's skip before calling this ``training_step``: that
  decision counts in ``other``, and a skipped round has no ``training_step`` time;
- ``compute_loss`` and the regime's ``extra_loss`` (SGT's extra forward on a peer's success);
- ``_get_per_token_logps_and_entropies``: its time and the shapes FLOPs are counted from, tagged by phase
  (``rollout``: old/reference log-probs; ``behaviour``: the behaviour log-probs a regime publishes, scored
  inside the SEE build when TRL kept none; ``exchange``: a regime's scoring in its transform, PRP;
  ``loss``: the training forward, with grad);
- TRL's own ``ProfilingContext`` (generation, reward functions, weight sync): TRL only sends these to
  wandb/mlflow/trackio, so they are summed here per step;
- a callback, first in the list (before validation's ``on_step_end``): step begin/end, optimizer
  (``_clip_grad_norm`` start to ``on_optimizer_step``), and the peak resident memory (``VmHWM``).

One JSON line per optimizer step goes to ``$MUTUALRL_STEP_PROFILE_OUT/<policy>.jsonl``; the first line
(``kind: model``) holds the model's shapes for the FLOP count. The SEE publish/read, barrier wait and
regime transform times are not taken here: the trainer already logs them (``mutual/*_s``) to metrics.jsonl.
"""

from __future__ import annotations

import importlib.abc
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

OUT_ENV = "MUTUALRL_STEP_PROFILE_OUT"
TARGET = "mutualrl.training.trainer"


class _State:
    """The current step's sums; one per process (one policy, one rank here)."""

    def __init__(self) -> None:
        self.reset()
        self.phase = "rollout"
        self.projected = 0  # rows the fused LM head projected in the current log-prob pass

    def reset(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.trl: dict[str, float] = defaultdict(float)
        self.logps: list[dict[str, Any]] = []
        self.last_train_end: float | None = None
        self.clip_start: float | None = None
        self.begin = time.perf_counter()


STATE = _State()


def peak_rss_mib() -> float:
    """Peak resident set of this process (``VmHWM``), MiB: what the kernel counted, not an estimate."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_cuda_mib() -> dict[str, float]:
    """Peak CUDA memory torch allocated in this process, MiB (only on a GPU)."""
    import torch

    if not torch.cuda.is_available():
        return {}
    return {"peak_cuda_mib": torch.cuda.max_memory_allocated() / 2**20}


def timed(name: str, func):
    """``func`` with its wall time added to ``STATE.sums[name]``."""
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            STATE.sums[name] += time.perf_counter() - start
    wrapper.__wrapped__ = func
    return wrapper


def model_shapes(model: Any) -> dict[str, Any]:
    """What the FLOP count needs: linear weights of the backbone (frozen/trainable), the LM head, attention."""
    import torch
    from transformers.pytorch_utils import Conv1D

    head = model.get_output_embeddings()
    frozen = trainable = 0
    for module in model.modules():  # peft's LoRA layers hold nn.Linear base_layer, lora_A, lora_B: counted here
        if isinstance(module, (torch.nn.Linear, Conv1D)) and module is not head:  # GPT-2 blocks use Conv1D
            size = module.weight.numel()
            if module.weight.requires_grad:
                trainable += size
            else:
                frozen += size
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = config.num_attention_heads
    # transformers 5 renamed the flag; reading the old name only warns
    checkpointing = ("is_activation_checkpointing" if hasattr(type(model), "is_activation_checkpointing")
                     else "is_gradient_checkpointing")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return {"kind": "model", "linear_frozen": frozen, "linear_trainable": trainable,
            "hidden": head.in_features, "vocab": head.out_features, "head_trainable": bool(head.weight.requires_grad),
            "layers": config.num_hidden_layers, "attn_width": heads * head_dim,
            "gradient_checkpointing": bool(getattr(model, checkpointing, False)),
            "torch_threads": torch.get_num_threads()}


def logps_wrapper(func):
    """Time each log-prob pass and keep its shapes (rows, padded length, scored positions, with grad or not)."""
    import torch

    def wrapper(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        start = time.perf_counter()
        STATE.projected = 0
        try:
            return func(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        finally:
            rows, length = input_ids.shape
            completion = int(attention_mask[:, -logits_to_keep:].sum())  # the positions the loss reads
            # The rows the fused head projected: every position (TRL on a CPU), the labelled ones (a Triton device),
            # or those and fillers (mutualrl on a CPU, host/trl_cpu_lm_head_patch.py); counted where the head projects them.
            scored = STATE.projected
            STATE.logps.append({"phase": STATE.phase, "grad": torch.is_grad_enabled(), "rows": rows,
                                "length": length, "scored": scored, "keep": int(logits_to_keep),
                                "completion": completion,
                                "seconds": time.perf_counter() - start})
    wrapper.__wrapped__ = func
    return wrapper


def phased(phase: str, func):
    """``func`` run with ``STATE.phase`` set, so log-prob passes inside it are tagged with ``phase``."""
    def wrapper(*args, **kwargs):
        before, STATE.phase = STATE.phase, phase
        try:
            return func(*args, **kwargs)
        finally:
            STATE.phase = before
    return wrapper


def make_callback(out: Path):
    """The step callback; it writes the step's line before validation's ``on_step_end`` runs."""
    from transformers import TrainerCallback

    class StepProfileCallback(TrainerCallback):
        trainer: Any = None

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            if self.trainer is not None and self.trainer.accelerator.is_main_process:
                self.write({**model_shapes(self.trainer.model), "policy": self.trainer.policy_name})

        def on_step_begin(self, args, state, control, **kwargs):
            STATE.reset()

        def on_optimizer_step(self, args, state, control, **kwargs):
            start = STATE.clip_start or STATE.last_train_end or time.perf_counter()
            STATE.sums["optimizer"] += time.perf_counter() - start

        def on_step_end(self, args, state, control, **kwargs):
            if not self.trainer.accelerator.is_main_process:
                return
            self.write({"kind": "step", "step": state.global_step, "step_s": time.perf_counter() - STATE.begin,
                        **{f"{k}_s": v for k, v in STATE.sums.items()},
                        "trl": dict(STATE.trl), "logps": STATE.logps, "peak_rss_mib": peak_rss_mib(),
                        **peak_cuda_mib()})

        def write(self, row: dict[str, Any]) -> None:
            out.mkdir(parents=True, exist_ok=True)
            with open(out / f"{self.trainer.policy_name}.jsonl", "a") as fh:
                fh.write(json.dumps(row) + "\n")

    return StepProfileCallback()


def count_projected_rows() -> None:
    """Count the rows TRL's log-prob function projects through the LM head (mutualrl's CPU function hands it its
    rows the same way)."""
    from trl.kernels import ChunkedLogProbFunction

    forward = ChunkedLogProbFunction.forward

    def counted(ctx, hidden, *args, **kwargs):
        STATE.projected += hidden.shape[0]
        return forward(ctx, hidden, *args, **kwargs)
    ChunkedLogProbFunction.forward = staticmethod(counted)


def patch_trainer(module: Any, out: Path) -> None:
    """Wrap the methods named in the module docstring on ``MutualGRPOTrainer`` (and TRL's profiler)."""
    from trl.extras import profiling

    cls = module.MutualGRPOTrainer
    original_exit = profiling.ProfilingContext.__exit__

    def profiled_exit(self, *exc):
        if self._start_time is not None:
            STATE.trl[self.name.split(".", 1)[-1]] += time.perf_counter() - self._start_time
        return original_exit(self, *exc)

    profiling.ProfilingContext.__exit__ = profiled_exit
    train_step = timed("training_step", cls.training_step)

    def training_step(self, *args, **kwargs):
        try:
            return train_step(self, *args, **kwargs)
        finally:
            STATE.last_train_end = time.perf_counter()
    cls.training_step = training_step
    cls._prepare_inputs = timed("prepare_inputs", phased("rollout", cls._prepare_inputs))
    cls.compute_loss = timed("compute_loss", phased("loss", cls.compute_loss))
    clip = cls._clip_grad_norm

    def clip_grad_norm(self, model):
        STATE.clip_start = time.perf_counter()
        return clip(self, model)
    cls._clip_grad_norm = clip_grad_norm
    cls._get_per_token_logps_and_entropies = logps_wrapper(cls._get_per_token_logps_and_entropies)
    count_projected_rows()
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        regime = self.regime
        regime.extra_loss = timed("extra_loss", phased("extra", regime.extra_loss))
        regime.process_step = phased("exchange", regime.process_step)
        # PRP scores its behaviour log-probs inside the SEE build (mutual/build_s): tell them apart
        regime.ensure_behaviour_logps = phased("behaviour", regime.ensure_behaviour_logps)
        callback = make_callback(out)
        callback.trainer = self
        self.callback_handler.callbacks.insert(0, callback)
    cls.__init__ = __init__


class _Finder(importlib.abc.MetaPathFinder):
    """Patches ``mutualrl.training.trainer`` right after it is first imported."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(fullname)
        loader, out = spec.loader, self.out
        exec_module = loader.exec_module

        def patched_exec(module):
            exec_module(module)
            patch_trainer(module, out)
        loader.exec_module = patched_exec
        return spec


def install() -> None:
    """Called from the generated ``sitecustomize.py``: arm the import hook when profiling was asked for."""
    out = os.environ.get(OUT_ENV)
    if out and TARGET not in sys.modules:
        sys.meta_path.insert(0, _Finder(Path(out)))

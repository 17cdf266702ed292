"""Trainer callbacks of a policy process: metrics, live status, validation (with its RNG guard), SEE heartbeat."""

from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import TrainerCallback

from mutualrl.atomic_io import append_text, write_json_atomic
from mutualrl.regimes.core.registry import all_regimes
from mutualrl.run_folder import RunPaths

# TRL log keys -> the names the run's metrics rows use (see docs/run-layout.md).
RENAMES = {"reward": "reward_mean"}


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value


class MetricsCallback(TrainerCallback):
    """Appends one ``kind: train`` line per logging step to ``RUN/metrics/<policy>.jsonl``."""

    def __init__(self, paths: RunPaths, policy: str, regime: str):
        self.path = paths.policy_metrics(policy)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.policy, self.regime = policy, regime

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "train_runtime" in logs:
            return
        line = {"kind": "train", "policy": self.policy, "step": int(state.global_step),
                "regime": self.regime, "time": time.time()}
        for key, value in logs.items():
            line[RENAMES.get(key, key)] = _clean(value)
        peak = device_peak_gib()
        if peak is not None:
            line[DEVICE_PEAK_KEY] = peak
        append_jsonl(self.path, line)


DEVICE_PEAK_KEY = "gpu/peak_allocated_gib"
"""Rank 0's most GPU memory allocated since the row before (torch's allocator), beside the plan's per-device figures."""


def device_peak_gib() -> float | None:
    """GiB ``torch.cuda.max_memory_allocated`` reached since the last call, whose peak it then resets; None off CUDA."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    peak = torch.cuda.max_memory_allocated() / 2**30
    torch.cuda.reset_peak_memory_stats()
    return round(peak, 3)


def append_jsonl(path: Path, obj: dict[str, Any]) -> None:
    """One metrics row, whole or not at all (a full disk leaves no half line: ``atomic_io.append_text``)."""
    append_text(path, json.dumps(obj) + "\n")


class StatusCallback(TrainerCallback):
    """Keeps ``RUN/status/<policy>.json`` current for the launcher's live progress display.

    It carries :data:`KEYS`, every registered regime's status metrics (``RegimeSpec.status``), so a
    regime added from outside the package reaches the progress line like a built-in one, and its per-source
    diagnostics (``<regime>/from/<peer>/<figure>``) for the display's detail lines."""

    KEYS = ("reward_mean", "entropy", "kl", "eval/reward@1")

    def __init__(self, paths: RunPaths, policy: str):
        self.keys = (*self.KEYS, *(key for spec in all_regimes() for key, _ in spec.status_keys))
        self.source_prefixes = tuple(f"{spec.name}/from/" for spec in all_regimes())
        self.path = paths.status(policy)
        self.policy = policy
        self.last: dict[str, Any] = {}
        self.phase = "starting"

    def write(self, state, phase: str | None = None) -> None:
        if phase is not None:
            self.phase = phase
        write_json_atomic(self.path, {
            "policy": self.policy, "phase": self.phase, "step": int(state.global_step),
            "max_steps": int(state.max_steps or 0), "time": time.time(), "pid": os.getpid(), **self.last,
        })

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.write(state, "training")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        for key in self.keys:
            source = {v: k for k, v in RENAMES.items()}.get(key, key)
            if source in logs and logs[source] is not None:
                self.last[key] = _clean(logs[source])
        for key, value in logs.items():  # per-source diagnostics, <regime>/from/<peer>/<figure>: the detail view
            if key.startswith(self.source_prefixes) and value is not None:
                self.last[key] = _clean(value)
        self.write(state)

    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.write(state)

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.write(state, "finished")


class HeartbeatCallback(TrainerCallback):
    """Touches this policy's SEE heartbeat so peers' barriers can report how long it has been silent."""

    def __init__(self, exchange: Any):
        self.exchange = exchange

    def on_step_begin(self, args, state, control, **kwargs):
        self.exchange.heartbeat()

    def on_step_end(self, args, state, control, **kwargs):
        self.exchange.heartbeat()


class RngGuard:
    """Save and restore every RNG so validation never perturbs the training trajectory."""

    def __enter__(self):
        self.state = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
                      torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
        return self

    def __exit__(self, *exc):
        random.setstate(self.state[0])
        np.random.set_state(self.state[1])
        torch.set_rng_state(self.state[2])
        if self.state[3] is not None:
            torch.cuda.set_rng_state_all(self.state[3])
        return False


VLLM_VALIDATION_CHUNK = 1024
"""Prompts per vLLM call in validation: large enough to keep the engine's batch full, small enough that
progress shows every few minutes even for 3072-token answers."""


def validation_shard(examples: list, rank: int, world: int, tp: int = 1) -> tuple[list, int, bool]:
    """(prompts, how many of them are real, whether its records count) of one rank's validation.

    Every rank gets as many prompts (a short shard is padded with a repeat of the first prompt): under ZeRO-3
    transformers' ``generate`` runs ``synced_gpus`` (a collective per token) whenever DeepSpeed ZeRO-3 is on and
    the world has several ranks, so ranks with different batch counts would wait on each other forever. The ranks
    of one vLLM tensor-parallel group (``grpo.vllm_tensor_parallel_size``) drive a single engine
    (``distributed_executor_backend="external_launcher"``), which needs the same prompts from each, as TRL's
    ``VLLMGeneration.generate`` gathers them over the group: they get the same shard, and the group's first rank
    reports it."""
    groups = max(1, world // max(1, tp))
    group = rank // max(1, tp)
    own = examples[group::groups]
    size = -(-len(examples) // groups)
    return own + [examples[0]] * (size - len(own)), len(own), rank % max(1, tp) == 0


def running_total(report: Any) -> Any:
    """``report(done)`` called with the count finished so far, from a progress that hears each batch's size (the
    evaluation functions' :data:`~mutualrl.pools.greedy.Progress`): the status phase must change at each batch
    for the launcher's stall clock to see it move."""
    done = [0]

    def add(count: int) -> None:
        done[0] += count
        report(done[0])

    return add


class ValidationCallback(TrainerCallback):
    """Held-out greedy reward@1 every ``every_steps`` optimizer steps, at the start and at the end.

    Paper, App. "Implementation details": validation every 5 steps with temperature 0, a single
    completion per prompt; step 0 is the "No Train" point. ``every_steps`` is ``validation.every_steps``, or
    ``schedule.validate_every`` converted to optimizer steps (``mutualrl.config.cadence``). Every
    rank evaluates a shard of the prompts (all ranks must take part under ZeRO-3), rank 0 writes
    the results (``eval/<policy>/step-NNNNNN.json``, a ``kind: eval`` line in ``metrics/``) and sends them to the
    trackers of ``grpo.report_to``.
    """

    def __init__(self, paths: RunPaths, policy: str, regime: str, examples: list, tokenizer: Any,
                 chat_template: bool, every_steps: int, max_new_tokens: int, batch_size: int, at_start: bool,
                 status: StatusCallback | None = None, verifier: Any = "default",
                 group_of: dict[str, str] | None = None, exchange: Any = None):
        self.paths, self.policy, self.regime = paths, policy, regime
        self.examples, self.tokenizer, self.chat_template = examples, tokenizer, chat_template
        self.every_steps, self.max_new_tokens, self.batch_size = every_steps, max_new_tokens, batch_size
        self.at_start = at_start
        self.status = status
        self.verifier = verifier
        self.group_of = group_of or {}  # prompt_id -> task group: logged as eval/group/<g>/reward@1
        self.exchange = exchange  # the SEE: peers waiting at its barrier see this validation progress
        self.trainer: Any = None
        self.done_steps: set[int] = set()

    def on_train_begin(self, args, state, control, **kwargs):
        step = state.global_step
        if (self.at_start and step == 0) or (step > 0 and self.every_steps > 0 and step % self.every_steps == 0):
            # resumed at a validation step: a stop that saved there skipped its validation (StopAtStepCallback), so
            # it is done now, on the checkpoint's weights; one done before the checkpoint has its result, so none
            self.validate(state)

    def on_step_end(self, args, state, control, **kwargs):
        if self.every_steps > 0 and state.global_step % self.every_steps == 0:
            self.validate(state)

    def on_train_end(self, args, state, control, **kwargs):
        self.validate(state)

    def validate(self, state) -> None:
        step = int(state.global_step)
        if step in self.done_steps:
            return
        self.done_steps.add(step)
        if not self.due(step):
            return
        from accelerate.utils import gather_object

        from mutualrl.evaluation.results import ModelEvalResult
        from mutualrl.tasks.reward_form import calls_named_in

        trainer = self.trainer
        accelerator = trainer.accelerator
        vllm = getattr(trainer, "use_vllm", False) and trainer.vllm_mode == "colocate"
        tp = int(getattr(trainer.vllm_generation, "tensor_parallel_size", 1) or 1) if vllm else 1
        shard, real, counts = validation_shard(self.examples, accelerator.process_index, accelerator.num_processes, tp)
        report = self.progress_reporter(state, step, len(shard))
        report(0)
        finished = running_total(report)  # both backends report each batch's size
        started = time.perf_counter()
        with calls_named_in(self.paths.reward_call(self.policy),  # a function that hangs here is named too
                            f"scoring the validation of step {step}: {len(shard)} prompt{'s' * (len(shard) != 1)}"):
            result = self.validate_shard(trainer, shard, step, finished, state, vllm)
        result.records = result.records[:real] if counts else []  # the padding, and a TP group's copies, dropped
        if accelerator.num_processes > 1:  # every rank evaluated a shard: merge them on rank 0
            records = [r for shard_records in gather_object([result.records]) for r in shard_records]
            result = ModelEvalResult(model=result.model, records=records, policy=self.policy, step=step,
                                     split=result.split, settings=result.settings)
        result.seconds = time.perf_counter() - started
        if not state.is_world_process_zero:
            return
        result.save(self.paths.eval_result(self.policy, step))
        metrics = result.metrics(group_of=self.group_of)
        line = {"kind": "eval", "policy": self.policy, "step": step, "regime": self.regime, "time": time.time(),
                **metrics, "eval/seconds": result.seconds}
        append_jsonl(self.paths.policy_metrics(self.policy), line)
        from mutualrl.training.trackers import report_validation

        report_validation(trainer, state, metrics)  # reward@1 overall and per task, to grpo.report_to
        if self.status is not None:
            self.status.last["eval/reward@1"] = result.reward_at_1
            self.status.write(state, "training")

    def due(self, step: int) -> bool:
        """Whether step ``step`` is validated: there are prompts and no result from before a resume. Rank 0 decides
        for every rank (:mod:`~mutualrl.training.rank_zero`): a rank that saw the result file on a shared file system
        where another did not would skip the collectives the other enters."""
        from mutualrl.training.rank_zero import decided_on_rank_zero

        due = decided_on_rank_zero(self.trainer.accelerator, lambda: bool(self.examples) and not self.paths.eval_result(
            self.policy, step).exists())
        if due and not self.examples:
            from mutualrl.errors import UsageError

            raise UsageError(f"policy {self.policy}: rank {self.trainer.accelerator.process_index} read no validation "
                             f"prompts from {self.paths.data} where rank 0 read some (a shared file system that does "
                             "not show the file to this machine yet?)")
        return due

    def progress_reporter(self, state: Any, step: int, total: int) -> Any:
        """``report(done)``: "validating done/total" in the status (the launcher's stall clock follows a phase that
        changes) and in this rank's SEE heartbeat (a peer's barrier waits as long as validation moves)."""
        def report(done: int) -> None:
            phase = f"validating {done}/{total} (step {step})"
            if self.status is not None and state.is_world_process_zero:
                self.status.write(state, phase)
            if self.exchange is not None:
                self.exchange.heartbeat(progress=phase)

        return report

    def validate_shard(self, trainer: Any, shard: list, step: int, report: Any, state: Any, vllm: bool) -> Any:
        """This rank's shard generated greedily (the colocated vLLM engine, or the unwrapped model) and scored."""
        if vllm:
            return self.validate_with_vllm(trainer, shard, step, report)
        from trl.models.utils import unwrap_model_for_generation

        from mutualrl.evaluation.generate import evaluate_examples

        with RngGuard(), unwrap_model_for_generation(
            trainer.model_wrapped, trainer.accelerator, gather_deepspeed3_params=trainer.args.ds3_gather_for_generation
        ) as unwrapped:
            return evaluate_examples(unwrapped, self.tokenizer, shard, max_new_tokens=self.max_new_tokens,
                                     batch_size=self.batch_size, chat_template=self.chat_template,
                                     model_name=self.policy, policy=self.policy, step=step,
                                     verifier=self.verifier, progress=report, trainer_state=state)

    def validate_with_vllm(self, trainer: Any, shard: list, step: int, report: Any = None) -> Any:
        """Greedy validation through the policy's colocated vLLM engine, synced to the current weights and woken
        from sleep mode (:func:`~mutualrl.training.vllm_engine.awake_engine`); the next generation at this step
        then needs no second sync, unless sleep mode discarded the weights again (TRL re-pushes them then)."""
        from mutualrl.evaluation.generate import evaluate_examples_llm
        from mutualrl.training.vllm_engine import awake_engine

        with RngGuard(), awake_engine(trainer.vllm_generation) as llm:
            trainer._last_loaded_step = trainer.state.global_step
            return evaluate_examples_llm(llm, self.tokenizer, shard, max_new_tokens=self.max_new_tokens,
                                         chat_template=self.chat_template, model_name=self.policy,
                                         policy=self.policy, step=step, verifier=self.verifier, progress=report,
                                         chunk=VLLM_VALIDATION_CHUNK, trainer_state=trainer.state)

"""How long a GPU plan's run takes: an estimate from FLOPs, and the step time measured where the run has one.

A dense transformer of P parameters spends about 2·P FLOPs a token forward and 6·P forward and backward (Kaplan et
al. 2020, "Scaling Laws for Neural Language Models", section 2.1). One generation step of a policy:

- generates ``prompts x K`` sequences of at most ``max_prompt_tokens + max_completion_length`` tokens: 2·P a token;
- trains on them ``num_iterations`` times: 6·P a token, 8·P with gradient checkpointing (a second forward);
- and scores them once more where TRL needs it: the reference model (``beta`` > 0) and the old policy's
  log-probabilities (a generation spread over several optimizer steps, or ``num_iterations`` > 1): 2·P a token each.

Tokens are counted at the length caps (an upper bound: completions that stop early cost less). The seconds divide
those FLOPs by the policy's GPUs x the card's dense bf16 peak x an efficiency: training reaches
:data:`TRAIN_EFFICIENCY` of the peak, generation (decoding is bound by memory traffic, not FLOPs)
:data:`GENERATE_EFFICIENCY`; both ranges are assumptions, shown with every estimate. The policies train side by side
on their own GPUs and meet at every step, so the run takes the slowest policy's steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.run_folder import RunPaths

BF16_PEAK_TFLOPS = {
    "GH200": 989.0, "H200": 989.0, "H100 PCIe": 756.0, "H100": 989.0, "B200": 2250.0, "A100": 312.0,
    "L40S": 362.0, "L40": 181.0, "A10G": 70.0, "A10": 125.0, "L4": 121.0,
}
"""Dense (no sparsity) bf16 tensor-core peak a GPU, TFLOPS, from NVIDIA's data sheets; matched on the card's name,
longest name first (``H100 PCIe`` before ``H100``)."""

ASSUMED_GPU = "H100"
"""The card a simulated node (``--dry-run --gpus N``) is costed on: its name is not known there; with ``--gpu-memory``
of :data:`H200_GIB` or more, an H200."""

H200_GIB = 120.0
"""A simulated card at least this large is costed as an H200 (141 GB: 140 GiB as torch reports it)."""

TRAIN_EFFICIENCY = (0.15, 0.40)
"""The share of the peak a training forward/backward reaches (ZeRO-3 on one node, bf16), low and high."""

GENERATE_EFFICIENCY = (0.05, 0.20)
"""The share of the peak vLLM's generation reaches, low and high: decoding reads every weight for each new token."""


def bf16_peak_tflops(gpu_name: str) -> float | None:
    """The dense bf16 peak of the card named ``gpu_name`` (``NVIDIA H100 80GB HBM3``); None: not in the table."""
    for known in sorted(BF16_PEAK_TFLOPS, key=len, reverse=True):
        if known.lower() in gpu_name.lower():
            return BF16_PEAK_TFLOPS[known]
    return None


@dataclass(frozen=True)
class PolicyTime:
    """One policy's generation step: its FLOPs and the seconds they take (low, high), and the measured step."""

    policy: str
    gpus: int
    params: float
    sequences: int
    """Sequences one generation step makes (prompts x K)."""
    generate_flops: float
    train_flops: float
    low_s: float
    high_s: float
    optimizer_steps_per_generation: int
    measured_s: float | None = None
    """Seconds an optimizer step took in this run folder's metrics (None: none measured)."""


@dataclass(frozen=True)
class RunTime:
    """The run's time on its GPUs (``--save-plan`` JSON: ``run_time``)."""

    gpu: str
    peak_tflops: float
    assumed_gpu: bool
    sequence_tokens: int
    """Tokens of a sequence at the caps (prompt + completion)."""
    policies: list[PolicyTime]
    generations: int | None
    """Generation steps of the run (None: its length is not known here)."""
    unknown: list[str]
    """Policies whose size is unknown: left out."""

    @property
    def step_s(self) -> tuple[float, float] | None:
        """(low, high) seconds of one generation step of the pool: its slowest policy."""
        if not self.policies:
            return None
        return max(p.low_s for p in self.policies), max(p.high_s for p in self.policies)

    @property
    def run_s(self) -> tuple[float, float] | None:
        """(low, high) seconds of the whole run, from a measured step where every policy has one."""
        if self.generations is None or not self.policies:
            return None
        measured = [p.measured_s * p.optimizer_steps_per_generation for p in self.policies if p.measured_s]
        if len(measured) == len(self.policies):
            return max(measured) * self.generations, max(measured) * self.generations
        low, high = self.step_s or (0.0, 0.0)
        return low * self.generations, high * self.generations


def policy_time(policy: str, grpo: Mapping[str, Any], gpus: int, params: float, sequences: int, sequence_tokens: int,
                peak_tflops: float, optimizer_steps_per_generation: int, measured_s: float | None) -> PolicyTime:
    """One policy's step, by the module's formula."""
    tokens = sequences * sequence_tokens
    passes = int(grpo.get("num_iterations") or 1)
    per_token = 8.0 if grpo.get("gradient_checkpointing") else 6.0
    extra_forwards = int(float(grpo.get("beta") or 0.0) != 0.0)
    steps_per_generation = grpo.get("steps_per_generation") or grpo.get("gradient_accumulation_steps") or 1
    if passes > 1 or int(steps_per_generation) > int(grpo.get("gradient_accumulation_steps") or 1):
        extra_forwards += 1  # TRL keeps the old policy's log-probabilities
    generate = 2.0 * params * tokens
    train = (per_token * passes + 2.0 * extra_forwards) * params * tokens
    speed = gpus * peak_tflops * 1e12
    low = generate / (speed * GENERATE_EFFICIENCY[1]) + train / (speed * TRAIN_EFFICIENCY[1])
    high = generate / (speed * GENERATE_EFFICIENCY[0]) + train / (speed * TRAIN_EFFICIENCY[0])
    return PolicyTime(policy, gpus, params, sequences, generate, train, low, high, optimizer_steps_per_generation,
                      measured_s)


def measured_step_s(paths: RunPaths, policy: str) -> float | None:
    """Seconds an optimizer step took in ``policy``'s metrics rows of this run folder (wall time between its first
    and last rows over the steps between them: validation and saves included); None with fewer than two rows."""
    import json

    rows: list[tuple[int, float]] = []
    try:
        with Path(paths.policy_metrics(policy)).open() as lines:
            for line in lines:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and row.get("kind") == "train" and isinstance(row.get("step"), int) \
                        and isinstance(row.get("time"), (int, float)):
                    rows.append((row["step"], float(row["time"])))
    except OSError:
        return None
    if len(rows) < 2 or rows[-1][0] <= rows[0][0]:
        return None
    return (rows[-1][1] - rows[0][1]) / (rows[-1][0] - rows[0][0])


def describe_run_time(estimate: RunTime) -> str:
    """The dry run's line."""
    card = f"{estimate.gpu}{' (assumed: a simulated node)' if estimate.assumed_gpu else ''}"
    basis = (f"on {card}, {estimate.peak_tflops:g} TFLOPS bf16 a GPU at {_share(TRAIN_EFFICIENCY)} training, "
             f"{_share(GENERATE_EFFICIENCY)} generating; tokens at the caps, {estimate.sequence_tokens:,} a sequence")
    if not estimate.policies:
        return f"Run time: not estimated (no policy's size is known: {', '.join(estimate.unknown)})"
    steps = "; ".join(
        f"{p.policy} {_seconds(p.low_s)}-{_seconds(p.high_s)} ({p.sequences:,} sequences on {p.gpus} GPU"
        f"{'s' if p.gpus != 1 else ''}"
        + (f"; measured here: {_seconds(p.measured_s * p.optimizer_steps_per_generation)}" if p.measured_s else "")
        + ")" for p in estimate.policies)
    run = estimate.run_s
    total = "the run's length is not known here"
    if run is not None:
        span = _seconds(run[0]) + (f"-{_seconds(run[1])}" if run[1] != run[0] else "")
        total = f"{estimate.generations:,} steps: {span}"
    left_out = f"; left out (size unknown): {', '.join(estimate.unknown)}" if estimate.unknown else ""
    return f"Run time (estimate, {basis}): a step {steps}; {total}{left_out}"


def _share(bounds: tuple[float, float]) -> str:
    return f"{bounds[0] * 100:.0f}-{bounds[1] * 100:.0f} %"


def _seconds(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def estimate_run_time(plans: Sequence[Any], gpu_name: str | None, sequence_tokens: int, run_dir: Path,
                      steps_of: Any, gpu_memory_gib: float | None = None) -> RunTime | None:
    """The run's time for ``plans`` (PolicyPlans) on ``gpu_name`` (None: :data:`ASSUMED_GPU`, or an H200 for cards of
    ``gpu_memory_gib`` >= :data:`H200_GIB`), ``steps_of(plan)``
    giving (sequences a generation step, optimizer steps a generation, the run's optimizer steps or None).
    None: a CPU plan, or a card not in :data:`BF16_PEAK_TFLOPS`."""
    gpu_plans = [p for p in plans if p.placement.device_type == "cuda"]
    if not gpu_plans:
        return None
    assumed = gpu_name is None
    gpu = gpu_name or ("H200" if (gpu_memory_gib or 0) >= H200_GIB else ASSUMED_GPU)
    peak = bf16_peak_tflops(gpu)
    if peak is None:
        return None
    paths = RunPaths(run_dir)
    timed, unknown, generations = [], [], []
    for plan in gpu_plans:
        sequences, per_generation, run_steps = steps_of(plan)
        if run_steps is not None:
            generations.append(math.ceil(run_steps / max(per_generation, 1)))
        if plan.memory is None:
            unknown.append(plan.name)
            continue
        timed.append(policy_time(plan.name, plan.grpo, len(plan.placement.devices) or 1, plan.memory.params,
                                 sequences, sequence_tokens, peak, max(per_generation, 1),
                                 measured_step_s(paths, plan.name)))
    return RunTime(gpu, peak, assumed, sequence_tokens, timed, max(generations) if generations else None, unknown)


def run_time_from_json(raw: Mapping[str, Any] | None) -> RunTime | None:
    """A plan's ``run_time`` as ``--save-plan`` wrote it."""
    if not raw:
        return None
    return RunTime(**{**raw, "policies": [PolicyTime(**p) for p in raw.get("policies", [])]})

"""The host RAM a GPU node needs for the run: the dry run's "Host RAM" line, the plan's refusal, the Slurm request.

On a GPU the model states live on the cards (:mod:`.checks`), but every policy process still holds host memory, and
all of them share the node's RAM (under Slurm: the task's ``--mem``). One policy with ``n`` ranks on the machine and
``P`` parameters holds, at its peak:

- on every rank, :data:`RANK_BASELINE_GIB` (the interpreter, the libraries, the CUDA runtime) and
  :data:`DATASET_GIB` (the task's prompts and what a step keeps of its rollouts), plus
  :data:`DATALOADER_WORKER_GIB` for each of ``grpo.dataloader_num_workers``; its ``accelerate launch`` process,
  :data:`LAUNCHER_GIB`;
- the larger of two moments, all its ranks together:

  - **start**, loading the weights. Under ZeRO-3 (``zero.Init``) transformers 5 reads the whole checkpoint into rank
    0's host memory (the other ranks read it onto ``meta``) and copies it into the partitions layer by layer
    (``modeling_utils._load_pretrained_model``): ``P x`` :data:`CHECKPOINT_BYTES` on rank 0; the reference model
    (``beta > 0``) is read the same way after the policy's state dict is freed. Otherwise every rank builds the
    model on the CPU in float32 (the worker's training dtype, ``training/worker.py: training_dtype``):
    ``n x P x 4 B``; under ZeRO-2 the policy stays on the CPU until DeepSpeed's ``prepare`` while TRL loads the
    reference model next to it (``GRPOTrainer.__init__``), twice that;
  - **a checkpoint save** (``schedule.save_every``, the final model). Rank 0 holds the model's weights in host
    memory: under ZeRO-3 DeepSpeed's consolidated 16-bit state dict (``stage3_gather_16bit_weights_on_model_save``,
    which the plan's DeepSpeed files set: ``_zero3_consolidated_16bit_state_dict`` copies every gathered parameter to
    rank 0's CPU), ``P x 2 B`` even for a LoRA policy (PEFT then keeps the adapter of it); under ZeRO-2 and DDP the
    copy safetensors makes to write the state dict from the GPU (one shard: transformers 5 shards at 50 GB), 16-bit
    under DeepSpeed, fp32 under DDP, the adapter alone for LoRA. And ``torch.save`` of the optimizer state copies one
    fp32 tensor at a time to the host: under ZeRO each rank's flat partition (``4 B x P / n``, ``4 B x P`` for all
    ``n`` ranks); under DDP rank 0's largest parameter's state (the embedding, ``vocab x hidden x 4 B``, when the
    shape is known). A LoRA policy's optimizer state is its adapters': nothing.

Not counted: the colocated vLLM engine's host memory beyond the baseline (TRL puts it to sleep at level 2, which
keeps no host copy of the weights, and vLLM's V1 engine has no CPU swap space: vLLM 0.30 has no ``swap_space``, and
TRL passes none); DeepSpeed's CPU offload (the plan's DeepSpeed files never turn it on, :mod:`.configs`); the page
cache of the checkpoint files beyond the state dict counted above.

The node's need is every policy's peak on it added up (their starts coincide, and in lock-step their saves too),
plus :data:`PARENT_GIB` for ``mutualrl train`` watching them; rank 0's terms are counted on every machine (an upper
bound on a machine without one). Above the node's RAM (``--ram``, else detected on a real node: its RAM or its
cgroup's limit, a Slurm task's ``--mem``, whichever is less; a simulated node's RAM is unknown without ``--ram``) the
plan is refused (``--force``: a warning), as a CPU pool's is
(:mod:`.bounds`). ``mutualrl sweep --slurm`` asks each array task for the largest need of the sweep's runs plus
:data:`SLURM_MARGIN` of it (``--mem``), unless ``--slurm-mem`` is given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mutualrl.errors import PlacementError

GIB = 2**30
RANK_BASELINE_GIB = 4.0
"""One GPU rank before its model: Python with torch, transformers, TRL, DeepSpeed and vLLM imported (~1 GiB), the
CUDA libraries it maps and touches (cuBLAS, cuDNN, NCCL, the kernels of torch and vLLM: ~1.5-2 GiB) and the CUDA
context's host side with NCCL's pinned buffers (~0.5-1 GiB). An estimate, not a measurement on this project's GPUs."""
DATASET_GIB = 0.5
"""The task's training and validation prompts each rank loads and tokenizes, and a step's rollouts (text, rewards)
it keeps for the SEE and the logs (1024 prompts x 5 completions x 3072 tokens are ~60 MB of text)."""
DATALOADER_WORKER_GIB = 1.0
"""Each ``dataloader_num_workers`` process of a rank: a copy of the rank whose copy-on-write pages Python's
reference counts touch."""
LAUNCHER_GIB = 0.5
"""A policy's ``accelerate launch`` process (torchrun's agent: Python with torch imported)."""
PARENT_GIB = 0.5
"""``mutualrl train`` itself, watching the policies."""
CHECKPOINT_BYTES = 2
"""Bytes per parameter of a checkpoint on disk (the paper's models are stored in bf16)."""
FP32_BYTES = 4
SAVE_16BIT_BYTES = 2
SLURM_MARGIN = 0.25
"""What ``sweep --slurm`` asks beyond the estimate: the estimate is a sum of estimates, and Slurm kills a task
whose memory passes ``--mem``."""


@dataclass(frozen=True)
class PolicyHost:
    """One policy's host memory on a node (``--save-plan`` JSON: ``host.policies``), in GiB."""

    policy: str
    ranks: int
    steady_gib: float
    """Every rank's baseline, dataset and dataloader workers, and the launcher."""
    start_gib: float
    """Loading the weights (all ranks together)."""
    save_gib: float
    """A checkpoint save (all ranks together)."""

    @property
    def peak_gib(self) -> float:
        return self.steady_gib + max(self.start_gib, self.save_gib)

    @property
    def peak_moment(self) -> str:
        return "start" if self.start_gib > self.save_gib else "save"


@dataclass(frozen=True)
class HostMemory:
    """The host RAM a GPU node needs for the run (``--save-plan`` JSON: ``host``)."""

    policies: list[PolicyHost]
    need_gib: float
    """Every policy's peak and the parent process: what the node must hold."""
    ram_gib: float | None
    """The node's RAM (``--ram``, else detected; None: unknown)."""
    unknown: list[str]
    """Policies whose size is unknown here: left out of ``need_gib``."""

    @property
    def slurm_mem_gb(self) -> int:
        """The memory to ask Slurm for (``--mem``, whole GB as Slurm counts them: 1024^3 bytes)."""
        return slurm_mem_gb(self.need_gib)


def slurm_mem_gb(need_gib: float) -> int:
    """``need_gib`` plus :data:`SLURM_MARGIN`, rounded up to a whole GB (Slurm's ``G`` is 1024^3 bytes)."""
    return math.ceil(need_gib * (1 + SLURM_MARGIN))


def policy_host(policy: str, params: float, ranks: int, zero_stage: int, *, reference: bool, lora: bool,
                dataloader_workers: int = 0, largest_params: float = 0.0) -> PolicyHost:
    """The host memory of one policy with ``ranks`` processes on the node and ``params`` parameters (module
    docstring). ``largest_params``: the elements of its largest tensor (the embedding), for DDP's optimizer save."""
    n = max(1, ranks)
    steady = n * (RANK_BASELINE_GIB + DATASET_GIB + max(0, dataloader_workers) * DATALOADER_WORKER_GIB) + LAUNCHER_GIB
    if zero_stage >= 3:
        start = params * CHECKPOINT_BYTES
    else:
        start = n * params * FP32_BYTES * (2 if reference and zero_stage > 0 else 1)
    if zero_stage >= 3:
        model_copy = params * SAVE_16BIT_BYTES
    elif lora:
        model_copy = 0.0
    else:
        model_copy = params * (SAVE_16BIT_BYTES if zero_stage > 0 else FP32_BYTES)
    if lora:
        optimizer = 0.0
    elif zero_stage > 0:
        optimizer = FP32_BYTES * params  # n ranks x 4 B x P / n
    else:
        optimizer = FP32_BYTES * largest_params
    return PolicyHost(policy, n, steady, start / GIB, (model_copy + optimizer) / GIB)


def host_memory(config: Any, plans: list[Any], ram_gib: float | None) -> HostMemory | None:
    """The node's host memory for the planned ``plans`` of ``config`` (None on a CPU: the RAM check there counts every
    process's model state and working memory itself, :mod:`.bounds`)."""
    from mutualrl.launch.plan.configs import ZERO_STAGES
    from mutualrl.launch.plan.model_shapes import model_shape

    if not plans or any(p.placement.device_type != "cuda" for p in plans):
        return None
    lora = {p.name: p.lora is not None for p in config.pool.policies}
    found, unknown = [], []
    for plan in plans:
        if plan.memory is None:
            unknown.append(plan.name)
            continue
        shape = model_shape(plan.model)
        found.append(policy_host(
            plan.name, plan.memory.params, plan.placement.processes_per_machine, ZERO_STAGES.get(plan.deepspeed, 0),
            reference="reference model" in plan.memory.breakdown, lora=lora.get(plan.name, False),
            dataloader_workers=int(plan.grpo.get("dataloader_num_workers") or 0),
            largest_params=float(shape.vocab * shape.hidden) if shape is not None else 0.0))
    need = sum(p.peak_gib for p in found) + PARENT_GIB
    return HostMemory(found, need, ram_gib, unknown)


def check_host_memory(host: HostMemory | None, force: bool) -> list[str]:
    """The node's need against its RAM when known: above it refused (``force``: a warning), as a CPU pool is."""
    if host is None or host.ram_gib is None or not host.policies or host.need_gib <= host.ram_gib:
        return []
    biggest = max(host.policies, key=lambda p: p.peak_gib)
    text = (f"this node cannot hold the run's host memory: about {host.need_gib:.1f} GiB of RAM needed, "
            f"{host.ram_gib:.1f} GiB here; {biggest.policy}'s {biggest.ranks} processes alone take "
            f"{biggest.peak_gib:.1f} GiB at its {biggest.peak_moment} ({describe_policy(biggest)})")
    if force:
        return [text + " (starting anyway: --force)"]
    raise PlacementError(text + "; use a node with more RAM (--ram GIB says what a simulated node has), fewer "
                         "policies on it, or --force")


def describe_policy(p: PolicyHost) -> str:
    """``4 ranks 18.5 + max(start 2.9, save 8.6)``."""
    ranks = f"{p.ranks} rank{'s' if p.ranks != 1 else ''}"
    return f"{ranks} {p.steady_gib:.1f} + max(start {p.start_gib:.1f}, save {p.save_gib:.1f})"


def host_line(host: HostMemory) -> str:
    """The dry run's line: the node's need, per policy, against its RAM, and the Slurm request it makes."""
    parts = [f"{p.policy} {p.peak_gib:.1f} GiB ({describe_policy(p)})" for p in host.policies]
    parts.append(f"mutualrl train {PARENT_GIB:g}")
    against = ("RAM unknown (--ram GIB checks it)" if host.ram_gib is None else
               f"{host.ram_gib:.1f} GiB of RAM ({host.need_gib / host.ram_gib:.0%})")
    unknown = f"; not counted (size unknown): {', '.join(host.unknown)}" if host.unknown else ""
    return (f"Host RAM per node at the peak: about {host.need_gib:.1f} GiB against {against}; Slurm --mem "
            f"{host.slurm_mem_gb}G (+{SLURM_MARGIN:.0%}): {'; '.join(parts)}{unknown}")


def host_from_json(raw: Mapping[str, Any] | None) -> HostMemory | None:
    """The ``host`` of a saved plan (None when it has none)."""
    if not raw:
        return None
    return HostMemory(**{**raw, "policies": [PolicyHost(**p) for p in raw.get("policies", [])]})

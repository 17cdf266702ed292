"""The launch plan as the user reads it (`mutualrl train --dry-run`): placement, batch, cadence, commands, files."""

from __future__ import annotations

import shlex
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from mutualrl.launch.plan.batching import trl_generation_batch
from mutualrl.config.cadence import render_schedule
from mutualrl.launch.plan.checkpoints import DiskPlan
from mutualrl.launch.plan.host_memory import host_line
from mutualrl.launch.plan.launch_plan import LaunchPlan, PolicyPlan, plan_path
from mutualrl.launch.plan.mwra import Placement
from mutualrl.launch.plan.run_time import describe_run_time


def render_plan(plan: LaunchPlan, console: Console, written: bool = False) -> None:
    """Print the plan: placement, derived batch fields, exact commands, config files, warnings."""
    pl = plan.placement
    where = (
        f"{pl.gpus} GPU{'s' if pl.gpus != 1 else ''}{' (simulated)' if plan.simulated else ''}"
        if pl.gpus
        else f"CPU ({pl.cpu_cores} core{'s' if pl.cpu_cores != 1 else ''})"
    )
    if plan.nodes > 1:
        where = f"{plan.nodes} machines x {where} (machine 0 at {plan.main_address})"
    console.print(
        Text.assemble(
            ("Launch plan ", "bold"),
            f"pool {plan.pool}, regime {plan.regime}, on {where}; run folder {plan.run_dir}",
        )
    )
    console.print(_placement_table(plan))
    if pl.idle_gpus:
        console.print(Text(f"idle GPUs: {','.join(map(str, pl.idle_gpus))}", style="yellow"))
    console.print(_batch_table(plan))
    if any(p.engine is not None for p in plan.policies):
        console.print(_engine_table(plan))
    if plan.disk is not None:
        console.print(Text(_disk_line(plan.disk)))
    if plan.host is not None:
        console.print(Text(host_line(plan.host)))
    if plan.run_time is not None:
        console.print(Text(describe_run_time(plan.run_time)))
    if plan.see_filesystem:
        console.print(Text(f"SEE folder: {plan.see_filesystem}"))
    render_schedule([(p.name, p.schedule) for p in plan.policies], console)

    console.print(Text("Launch commands", style="bold"))
    for machine in range(plan.nodes):
        if plan.nodes > 1:
            console.print(Text(f"## machine {machine} (--machine-rank {machine}) starts:", style="bold"))
        for spec in plan.specs_for(machine):
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in spec.env.items())
            console.print(Text(f"# {spec.policy}  (log: {spec.log_path}, cwd: {spec.cwd})", style="dim"))
            console.print(Text(f"{env} {shlex.join(spec.argv)}"), soft_wrap=True)

    console.print(Text("Config files" + (" (written)" if written else " (would be written by the run)"),
                       style="bold"))
    for p in plan.policies:
        console.print(Text(f"  {p.accelerate_config_path}"))
        if p.deepspeed_config_path:
            console.print(Text(f"  {p.deepspeed_config_path}"))
    console.print(Text(f"  {plan_path(Path(plan.run_dir))}"))

    notes = [n for p in plan.policies for n in p.notes]
    if notes:
        console.print(Text("Adjustments", style="bold"))
        for note in notes:
            console.print(Text(f"  - {note}"))
    if plan.warnings:
        console.print(Text("Warnings", style="bold yellow"))
        for warning in plan.warnings:
            console.print(Text(f"  ! {warning}", style="yellow"))

def split_words(placement: Placement) -> str:
    """How the devices were split, in words: an explicit device map, an even split, or the counts of an uneven one
    (``device_share``: 2+2+4 GPUs is no even split)."""
    if placement.explicit:
        return "explicit device map"
    if placement.device_type == "cuda":
        counts, unit = [len(p.devices) for p in placement.policies], "GPUs"
    else:
        counts, unit = [p.cpu_threads for p in placement.policies], "threads"
    if len(set(counts)) <= 1:
        return "even split"
    return f"split by device_share: {'+'.join(map(str, counts))} {unit}"


def _placement_table(plan: LaunchPlan) -> Table:
    """Each policy's machines, devices, processes, threads, DeepSpeed, vLLM and memory per device."""
    pl = plan.placement
    table = Table(title=f"MWRA placement ({split_words(pl)})")
    columns = ["policy", "model", "devices", "processes", "threads", "DeepSpeed", "vLLM", "model state / device"]
    if plan.nodes > 1:
        columns.insert(2, "machines")
    for col in columns:
        table.add_column(col, overflow="fold")
    for p in plan.policies:
        devices = _devices(p, plan) if p.placement.device_type == "cuda" else "cpu"
        memory = f"{p.memory.gib_per_device:.1f} GiB ({p.memory.source})" if p.memory else "unknown size"
        machines = [",".join(map(str, p.placement.machines))] if plan.nodes > 1 else []
        table.add_row(
            p.name,
            p.model,
            *machines,
            devices,
            str(p.placement.num_processes),
            str(p.placement.cpu_threads),
            p.deepspeed,
            p.vllm,
            memory,
        )
    return table


def _batch_table(plan: LaunchPlan) -> Table:
    """Each policy's GRPO batch fields and what one step samples and updates."""
    batch = Table(title="GRPO batch per policy")
    for col in (
        "policy",
        "K",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "steps_per_generation",
        "prompts / step",
        "completions / step",
        "updates / step",
        "micro-batch rows",
        "activations / process",
    ):
        batch.add_column(col, overflow="fold")
    for p in plan.policies:
        completions, prompts = trl_generation_batch(p.grpo, p.placement.world_size)
        updates = _updates_per_step(p)
        micro = p.micro_batch
        batch.add_row(
            p.name,
            str(p.grpo.get("num_generations", "8 (TRL default)")),
            str(p.grpo.get("per_device_train_batch_size", "8 (TRL default)")),
            str(p.grpo.get("gradient_accumulation_steps", "1 (TRL default)")),
            str(p.grpo.get("steps_per_generation", "= GA (TRL default)")),
            str(prompts),
            str(completions),
            updates,
            "-" if micro is None else f"{micro.describe()} x {micro.tokens_per_row} tokens",
            "unknown (model shape)" if micro is None or micro.activation_gib is None
            else f"{micro.activation_gib:.1f} GiB",
        )
    return batch


def _engine_table(plan: LaunchPlan) -> Table:
    """Each colocated vLLM engine: its share of the card and where it comes from, its KV cache in sequences of the
    recipe's length next to the scheduler caps."""
    table = Table(title="vLLM engine per policy (colocated)")
    for col in ("policy", "share of each GPU", "engine / weights / KV cache", "KV capacity", "max_num_seqs",
                "max_num_batched_tokens", "max_model_len"):
        table.add_column(col, overflow="fold")
    for p in plan.policies:
        e = p.engine
        if e is None:
            continue
        share = "-" if e.gpu_memory_utilization is None else f"{e.gpu_memory_utilization:g}"
        gib = ("unknown (no card size: --gpu-memory)" if e.engine_gib is None else
               f"{e.engine_gib:.1f} / {e.weights_gib:.1f} / {e.kv_cache_gib:.1f} GiB" if e.kv_cache_gib is not None
               else f"{e.engine_gib:.1f} GiB / model shape unknown")
        capacity = ("-" if e.kv_capacity_sequences is None else
                    f"{e.kv_capacity_sequences} sequences of {e.sequence_tokens} tokens"
                    + (" (fewer than max_num_seqs: the rest wait or are preempted)"
                       if e.kv_capacity_sequences < e.max_num_seqs else ""))
        table.add_row(p.name, f"{share} ({e.share_source})", gib, capacity, f"{e.max_num_seqs} (TRL's "
                      f"{e.trl_max_num_seqs})", str(e.max_num_batched_tokens),
                      "the model's context" if e.max_model_len is None else str(e.max_model_len))
    return table


def _disk_line(disk: DiskPlan) -> str:
    """The run's peak disk, per policy, against the free space of the run folder's filesystem."""
    if not disk.policies:
        return "Disk at the run's peak: not estimated (no policy's model size is known, or none saves checkpoints)"
    parts = []
    for p in disk.policies:
        kept = "every checkpoint" if p.keep is None else f"save_total_limit {p.keep}"
        parts.append(f"{p.policy} {p.peak_gib:.1f} GiB (checkpoints of {p.checkpoint_gib:.1f} GiB, {kept}"
                     f"{'' if p.saves is None else f', {p.saves} written'}; final weights)")
    free = "unknown free space" if disk.free_gib is None else f"{disk.free_gib:.1f} GiB free"
    held = f", {disk.held_gib:.1f} GiB of it already there" if disk.held_gib else ""
    return f"Disk at the run's peak: {disk.peak_gib:.1f} GiB{held} against {free} on {disk.filesystem}: {'; '.join(parts)}"


def _devices(p: PolicyPlan, plan: LaunchPlan) -> str:
    """GPU ids; with several machines ``m<k>:<local ids>`` per machine."""
    if plan.nodes == 1:
        return ",".join(map(str, p.placement.devices))
    gpus = plan.placement.gpus
    return " ".join(f"m{m}:" + ",".join(str(d % gpus) for d in p.placement.devices if d // gpus == m)
                    for m in p.placement.machines)


def _updates_per_step(p: PolicyPlan) -> str:
    grpo = p.grpo
    ga = int(grpo.get("gradient_accumulation_steps", 1))
    steps = grpo.get("steps_per_generation") or ga
    mu = int(grpo.get("num_iterations", 1))
    if int(steps) % ga:
        return f"{int(steps) / ga:.2f} (uneven)"
    return str(int(steps) // ga * mu)

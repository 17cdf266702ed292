"""The launch plan: MWRA placement + per-policy GRPO fields + configs + commands, and its dry run.

``make_launch_plan`` decides everything the parent ``mutualrl train`` needs before a
process starts, each policy's final GRPOConfig arguments included; ``LaunchPlan.write(run_dir)``
puts ``RUN/launch/plan.json`` (the record; machines K > 0 check theirs against it, launch/secondary_machine.py),
each policy's ``RUN/launch/<policy>.grpo.json`` (the one file a worker reads of the plan: its
``GRPOConfig(**...)``, training/grpo_args.py) and the accelerate / DeepSpeed files there;
``render_plan`` prints it for ``mutualrl train --dry-run``.
"""

from __future__ import annotations

import sys
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_text_atomic
from mutualrl.config.cadence import apply_cadence, describe, policy_cadence, validation_interval
from mutualrl.config.schema import BatchConfig, RunConfig
from mutualrl.errors import UsageError
from mutualrl.launch.plan.batching import BatchSizeError, DerivedBatch, apply_batch, fits, split_across_cpu_ranks
from mutualrl.launch.plan.bounds import MicroBatch, check_bounds, plan_micro_batches
from mutualrl.launch.plan.checkpoints import DiskPlan, PolicyDisk, check_disk, disk_plan, keep_for_resume
from mutualrl.launch.plan.checks import MemoryEstimate, check_same_prompts, memory_check
from mutualrl.launch.plan.commands import (
    ADDRESS_PLACEHOLDER,
    LaunchSpec,
    adapt_grpo_to_device,
    build_machine_specs,
    machine_address,
    policy_port,
)
from mutualrl.launch.plan.configs import (
    ZERO_STAGES,
    accelerate_config,
    deepspeed_config,
    mixed_precision_of,
    write_json,
    write_yaml,
)
from mutualrl.launch.plan.grpo_decisions import GRPODecision
from mutualrl.launch.plan.detect import Node, this_node
from mutualrl.launch.plan.colocated_vllm import PlannedEngine, engine_length, engine_note, planned_engine
from mutualrl.launch.plan.host_memory import HostMemory, host_from_json, host_memory
from mutualrl.launch.plan.machines import plan_placement_nodes
from mutualrl.launch.plan.mwra import Placement, PolicyPlacement
from mutualrl.launch.plan.resume_ranks import check_resume_ranks
from mutualrl.launch.plan.run_length import check_train_prompts, optimizer_steps_per_epoch, plan_steps
from mutualrl.launch.plan.run_time import RunTime, estimate_run_time, run_time_from_json
from mutualrl.config.grpo_schema import grpo_default
from mutualrl.pools.loading import remote_code_note
from mutualrl.regimes.core.registry import get_regime
from mutualrl.run_folder import RunPaths, read_json
from mutualrl.ops.mounts import barrier_stall, mount_of
from mutualrl.tasks.registry import known_train_prompts
from mutualrl.training.grpo_args import owned_grpo_fields, planned_grpo_env, planned_grpo_text
from mutualrl.training.trackers import check_trackers

PLAN_SCHEMA_VERSION = 1


@dataclass
class PolicyPlan:
    """Everything decided for one policy."""

    name: str
    model: str
    placement: PolicyPlacement
    grpo: dict[str, Any]
    """The policy's GRPOConfig keyword arguments, final (shared + policy overrides, batch-derived,
    device-adapted, cadence, and mutualrl's own fields: output_dir, run_name, report_to, disable_tqdm);
    the worker passes them to GRPOConfig as they are."""
    batch: DerivedBatch | None
    deepspeed: str
    main_process_port: int
    accelerate_config_path: str
    accelerate_config: dict[str, Any]
    deepspeed_config_path: str | None
    deepspeed_config: dict[str, Any] | None
    launch: LaunchSpec
    notes: list[str] = field(default_factory=list)
    memory: MemoryEstimate | None = None
    schedule: list[list[str]] = field(default_factory=list)
    """Run length and cadence rows (setting, recipe value with its unit, optimizer steps) for the dry run."""
    launches: list[LaunchSpec] = field(default_factory=list)
    """One command per machine the policy runs on (``launch`` is the first machine's)."""
    engine: PlannedEngine | None = None
    """The colocated vLLM engine: its caps, share of the card and KV capacity (None: no colocated vLLM)."""
    micro_batch: MicroBatch | None = None
    """One forward/backward of each process: its rows (own, peer, rescue) and their activations."""

    @property
    def commands(self) -> list[LaunchSpec]:
        return self.launches or [self.launch]

    @property
    def vllm(self) -> str:
        return str(self.grpo.get("vllm_mode", "colocate")) if self.grpo.get("use_vllm") else "off"


@dataclass
class LaunchPlan:
    run_dir: str
    pool: str
    regime: str
    placement: Placement
    policies: list[PolicyPlan]
    simulated: bool = False
    warnings: list[str] = field(default_factory=list)
    schema_version: int = PLAN_SCHEMA_VERSION
    nodes: int = 1
    machine: int = 0
    """The machine that made this plan (``launch.machine_rank``)."""
    main_address: str = "127.0.0.1"
    disk: DiskPlan | None = None
    """The checkpoints and final weights the run holds at its peak against the run folder's free space."""
    host: HostMemory | None = None
    """The host RAM a GPU node needs for the run's processes against its RAM (None: a CPU pool)."""
    see_filesystem: str = ""
    """The filesystem of the SEE folder, in words (the barrier polls it)."""
    run_time: RunTime | None = None
    """The run's time on its GPUs, estimated and where measured (None: a CPU plan)."""

    def policy(self, name: str) -> PolicyPlan:
        for plan in self.policies:
            if plan.name == name:
                return plan
        raise KeyError(f"no policy {name!r} in the launch plan (has: {', '.join(p.name for p in self.policies)})")

    @property
    def specs(self) -> list[LaunchSpec]:
        """The commands this plan's machine runs (one machine: one per policy)."""
        return self.specs_for(self.machine)

    def specs_for(self, machine: int) -> list[LaunchSpec]:
        return [spec for p in self.policies for spec in p.commands if spec.machine == machine]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "run_dir": self.run_dir,
            "pool": self.pool,
            "regime": self.regime,
            "simulated": self.simulated,
            "nodes": self.nodes,
            "machine": self.machine,
            "main_address": self.main_address,
            "placement": self.placement.to_dict(),
            "warnings": list(self.warnings),
            "disk": asdict(self.disk) if self.disk else None,
            "host": asdict(self.host) if self.host else None,
            "see_filesystem": self.see_filesystem,
            "run_time": asdict(self.run_time) if self.run_time else None,
            "policies": [
                {
                    "name": p.name,
                    "model": p.model,
                    "placement": {**asdict(p.placement), "devices": list(p.placement.devices),
                                  "machines": list(p.placement.machines)},
                    "grpo": p.grpo,
                    "batch": asdict(p.batch) if p.batch else None,
                    "deepspeed": p.deepspeed,
                    "main_process_port": p.main_process_port,
                    "accelerate_config_path": p.accelerate_config_path,
                    "accelerate_config": p.accelerate_config,
                    "deepspeed_config_path": p.deepspeed_config_path,
                    "deepspeed_config": p.deepspeed_config,
                    "launch": p.launch.to_dict(),
                    "launches": [spec.to_dict() for spec in p.launches],
                    "notes": list(p.notes),
                    "memory": asdict(p.memory) if p.memory else None,
                    "schedule": [list(row) for row in p.schedule],
                    "engine": asdict(p.engine) if p.engine else None,
                    "micro_batch": asdict(p.micro_batch) if p.micro_batch else None,
                }
                for p in self.policies
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LaunchPlan:
        version = data.get("schema_version")
        if version != PLAN_SCHEMA_VERSION:
            raise UsageError(f"launch plan schema version {version!r} is not {PLAN_SCHEMA_VERSION}; re-plan the run")
        raw_placement = data["placement"]
        placed = [_placement_from(p) for p in raw_placement["policies"]]
        placement = Placement(
            policies=placed,
            gpus=raw_placement["gpus"],
            cpu_cores=raw_placement["cpu_cores"],
            explicit=raw_placement["explicit"],
            idle_gpus=list(raw_placement.get("idle_gpus", [])),
            warnings=list(raw_placement.get("warnings", [])),
            nodes=int(raw_placement.get("nodes", 1)),
        )
        policies = []
        for raw in data["policies"]:
            policies.append(
                PolicyPlan(
                    name=raw["name"],
                    model=raw["model"],
                    placement=_placement_from(raw["placement"]),
                    grpo=raw["grpo"],
                    batch=DerivedBatch(**raw["batch"]) if raw.get("batch") else None,
                    deepspeed=raw["deepspeed"],
                    main_process_port=raw["main_process_port"],
                    accelerate_config_path=raw["accelerate_config_path"],
                    accelerate_config=raw["accelerate_config"],
                    deepspeed_config_path=raw.get("deepspeed_config_path"),
                    deepspeed_config=raw.get("deepspeed_config"),
                    launch=LaunchSpec(**raw["launch"]),
                    notes=list(raw.get("notes", [])),
                    memory=MemoryEstimate(**raw["memory"]) if raw.get("memory") else None,
                    schedule=[list(row) for row in raw.get("schedule", [])],
                    launches=[LaunchSpec(**spec) for spec in raw.get("launches", [])],
                    engine=PlannedEngine(**raw["engine"]) if raw.get("engine") else None,
                    micro_batch=MicroBatch(**raw["micro_batch"]) if raw.get("micro_batch") else None,
                )
            )
        return cls(
            run_dir=data["run_dir"],
            pool=data["pool"],
            regime=data["regime"],
            placement=placement,
            policies=policies,
            simulated=bool(data.get("simulated", False)),
            warnings=list(data.get("warnings", [])),
            nodes=int(data.get("nodes", 1)),
            machine=int(data.get("machine", 0)),
            main_address=str(data.get("main_address", "127.0.0.1")),
            disk=_disk_from(data.get("disk")),
            host=host_from_json(data.get("host")),
            see_filesystem=str(data.get("see_filesystem", "")),
            run_time=run_time_from_json(data.get("run_time")),
        )

    def write(self, run_dir: Path | None = None) -> list[Path]:
        """Write ``RUN/launch/plan.json``, every policy's ``<policy>.grpo.json`` and config files; returns the paths.

        The config files are always written where the commands expect them (under the
        plan's run_dir); ``run_dir`` must be that folder if given.
        """
        target = Path(run_dir or self.run_dir).resolve()
        if target != Path(self.run_dir).resolve():
            raise ValueError(f"this plan's commands point at {self.run_dir}, not {target}")
        written = []
        for p in self.policies:
            written.append(write_yaml(Path(p.accelerate_config_path), p.accelerate_config))
            if p.deepspeed_config is not None and p.deepspeed_config_path:
                written.append(write_json(Path(p.deepspeed_config_path), p.deepspeed_config))
            # What the worker needs of the plan, in a file of its own (training reads no launch code): its GRPOConfig,
            # vouched for by the digest of these very bytes.
            written.append(write_text_atomic(RunPaths(target).planned_grpo(p.name), vouch_for_settings(p)))
        RunPaths(target).logs.mkdir(parents=True, exist_ok=True)
        written.append(write_json(plan_path(target), self.to_json()))
        return written

    @classmethod
    def read(cls, run_dir: Path) -> LaunchPlan:
        path = plan_path(run_dir)
        if not path.is_file():
            raise UsageError(f"{path}: no launch plan (the run was not planned by `mutualrl train`)")
        return cls.from_json(read_json(path))  # damaged, another type, a FIFO: one line naming it


def vouch_for_settings(plan: PolicyPlan) -> str:
    """The bytes of ``plan``'s ``<policy>.grpo.json``; every command of the policy names their sha256 (the worker
    takes the file only with that digest, training/grpo_args.py). Called where the settings are final and again as
    the file is written, so a stage that changes them after the first call cannot leave a stale digest."""
    text = planned_grpo_text(plan.grpo)
    for command in plan.commands:
        command.env.update(planned_grpo_env(text))
    return text


def plan_path(run_dir: Path) -> Path:
    return RunPaths(Path(run_dir)).plan


def _disk_from(raw: dict[str, Any] | None) -> DiskPlan | None:
    if not raw:
        return None
    return DiskPlan(**{**raw, "policies": [PolicyDisk(**p) for p in raw.get("policies", [])]})


def _placement_from(raw: dict[str, Any]) -> PolicyPlacement:
    return PolicyPlacement(
        name=raw["name"],
        device_type=raw["device_type"],
        devices=tuple(raw["devices"]),
        num_processes=raw["num_processes"],
        cpu_threads=raw["cpu_threads"],
        share=raw.get("share", 1.0),
        machines=tuple(raw.get("machines", (0,))),
    )


# ----------------------------------------------------------------------------------------
# Planning
# ----------------------------------------------------------------------------------------


def make_launch_plan(
    config: RunConfig,
    run_dir: Path,
    gpus: int | None = None,
    python: str = sys.executable,
    *,
    simulate: bool = False,
    cpu_cores: int | None = None,
    gpu_memory_gib: float | None = None,
    ram_gib: float | None = None,
    param_counts: dict[str, float] | None = None,
    vllm_available: bool | None = None,
    parent_visible_devices: str | None = None,
    addresses: dict[int, str] | None = None,
    dry_run: bool = False,
    resume_ranks: Mapping[str, tuple[int, str]] | None = None,
    train_prompts: int | None = None, prompts_source: str = "",
) -> LaunchPlan:
    """Plan the run: placement, per-policy GRPO fields, config files and commands.

    ``dry_run``: a tracker that is not installed is a warning (the real run refuses it), as docs/evaluation.md says.
    ``gpus``: GPUs to use (default ``config.launch.gpus``, else all visible). Unless ``simulate``, asking for more
    GPUs than are visible fails, and device memory, CPU cores and RAM are detected; with ``simulate`` (``--dry-run
    --gpus 8``) nothing is detected and the memory check runs only if ``gpu_memory_gib`` is given.
    ``param_counts``: {policy: parameters} hints for the memory check (otherwise known model cards, then the size in
    the model name). Raises PlacementError (before anything starts) when the pool cannot be placed or its batch cannot
    be split. Several machines (``launch.nodes``): ``gpus`` is per machine, every machine's commands are planned
    (``PolicyPlan.launches``) as ``launch.machine_rank`` sees them; ``addresses`` {machine: address} fills in where a
    policy spanning machines other than 0 meets.
    ``resume_ranks``: ``--resume``'s checkpoints, refused on another rank count (:mod:`.resume_ranks`).
    ``train_prompts`` (from ``prompts_source``): refused when fewer than one step draws (:mod:`.run_length`).
    """
    run_dir = Path(run_dir).resolve()
    launch = config.launch
    node = this_node(config, gpus, simulate, cpu_cores, gpu_memory_gib, ram_gib, parent_visible_devices)
    placement = _place_pool(config, node)
    check_resume_ranks(resume_ranks or {}, placement)
    stage = ZERO_STAGES[launch.deepspeed]
    specs = build_machine_specs(config, placement, run_dir, python, parent_visible_devices=node.visible_devices,
                                machine=launch.machine_rank, addresses=addresses)
    plans = [
        _plan_policy(config, index, placement, launches, run_dir, vllm_available, addresses, train_prompts)
        for index, (_, launches) in enumerate(zip(config.pool.policies, specs, strict=True))
    ]
    warnings = [
        *check_train_prompts(plans, train_prompts, config.batch, prompts_source or f"task {config.task.name}"),
        *placement.warnings,
        *check_trackers([p.grpo.get("report_to") for p in plans], fail=not (simulate or dry_run)),
        *check_same_prompts(config, plans),
        *memory_check(config, placement, plans, node.gpu_memory_gib, node.ram_gib, param_counts or {}, stage),
    ]
    plan_micro_batches(config, placement, plans, node.gpu_memory_gib)  # after: it reads the model states
    warnings += check_bounds(config, placement, plans, node.ram_gib, node.gpu_memory_gib)
    disk = disk_plan(config, plans, RunPaths(run_dir).policies)
    warnings += check_disk(disk, refuse=not (simulate or dry_run), force=launch.force)
    see_filesystem, stall = _see_filesystem(config, run_dir)
    warnings += stall
    for plan in plans:  # after the last stage that changes the settings (batch lowered, vLLM share derived)
        vouch_for_settings(plan)
    if simulate and node.gpu_memory_gib is None and node.gpus > 0:
        warnings.append("memory check skipped: GPU memory is unknown for a simulated node (--gpus); give it with "
                        "--gpu-memory GIB (e.g. --gpu-memory 80 for an 80 GiB card)")
    warnings += builtin_pool_on_gpus(plans)
    return LaunchPlan(
        run_dir=str(run_dir),
        pool=config.pool.name,
        regime=config.regime.name,
        placement=placement,
        policies=plans,
        simulated=simulate,
        warnings=warnings,
        nodes=launch.nodes,
        machine=launch.machine_rank,
        main_address=launch.main_address,
        disk=disk,
        host=host_memory(config, plans, node.ram_gib),
        see_filesystem=see_filesystem,
        run_time=_run_time(config, plans, node, run_dir, train_prompts),
    )


def _run_time(config: RunConfig, plans: list[PolicyPlan], node: Node, run_dir: Path,
              train_prompts: int | None) -> RunTime | None:
    """The run's time on its GPUs (:mod:`.run_time`): sequences at the length caps, the run's steps from its prompts."""
    prompts = train_prompts if train_prompts is not None else known_train_prompts(config.task)
    completion = max(int(p.grpo.get("max_completion_length") or grpo_default("max_completion_length")) for p in plans)
    return estimate_run_time(plans, node.gpu_name, config.task.max_prompt_tokens + completion, run_dir,
                             lambda plan: plan_steps(plan.grpo, plan.placement.world_size, prompts),
                             node.gpu_memory_gib)


def _see_filesystem(config: RunConfig, run_dir: Path) -> tuple[str, list[str]]:
    """The SEE folder's filesystem in words, and the warning where its barrier would stall on it."""
    see_root = RunPaths(run_dir).see_root(config.see.dir)
    see_mount = mount_of(see_root)
    stall = barrier_stall(see_mount)
    described = f"{see_root} on " + (see_mount.describe() if see_mount else "an unknown filesystem")
    return described, [f"the SEE folder {see_root}: {stall}"] if stall else []


def check_resume_placement(config: RunConfig, saved: Mapping[str, tuple[int, str]]) -> None:
    """``--resume``: this machine's placement against the ranks each policy's checkpoint was saved by (``saved``),
    before the run folder is rolled back or its config rewritten (a refused resume leaves the run as it was)."""
    node = this_node(config, config.launch.gpus, False, None, None, None, None)
    check_resume_ranks(saved, _place_pool(config, node))


def _place_pool(config: RunConfig, node: Node) -> Placement:
    """MWRA over every machine; a policy's world size must divide its batch (``batch:`` recipes)."""
    launch, batch = config.launch, config.batch
    return plan_placement_nodes(
        [(p.name, p.device_share) for p in config.pool.policies],
        node.gpus,
        nodes=launch.nodes,
        device_map=launch.device_map,
        cpu_cores=node.cpu_cores,
        threads_per_policy=launch.threads_per_policy,
        world_size_ok=(lambda _name, n: fits(batch, n)) if batch is not None else None,
        cpu_processes=launch.cpu_processes,
    )


def _policy_grpo(
    config: RunConfig, index: int, placement: Placement, run_dir: Path, vllm_available: bool | None,
    train_prompts: int | None = None,
) -> tuple[dict[str, Any], DerivedBatch | None, list[str], list[list[str]]]:
    """One policy's GRPOConfig arguments, final: shared + its overrides, then the fields each stage decides for its
    devices, batch, cadence and resume, then the fields mutualrl owns
    (:func:`~mutualrl.training.grpo_args.owned_grpo_fields`). The only merge a launched worker's GRPOConfig is
    built from.

    Returns (grpo, derived batch, notes, schedule rows for the dry run).
    """
    launch, batch, policy = config.launch, config.batch, config.pool.policies[index]
    placed = placement.of(policy.name)
    regime_fields = dict(get_regime(config.regime.name).grpo_defaults)  # the regime's, where the recipe is silent
    # what the stages read, a view: the policy's fields over the shared, over the regime's
    recipe = ChainMap(policy.grpo, config.grpo, regime_fields)
    device = adapt_grpo_to_device(recipe, placed, launch.deepspeed, vllm_available)
    length = engine_length(ChainMap(device.fields, recipe), placed.device_type, config.task.max_prompt_tokens,
                           config.validation.max_new_tokens,
                           _known_context(policy.model) if placed.device_type == "cuda" else None)
    sizes, derived = _policy_batch(recipe, batch, placement, policy.name)
    cadence = policy_cadence(config.schedule, batch, recipe)
    counts, cadence_notes = apply_cadence(recipe, cadence)
    keep = keep_for_resume(config, ChainMap(counts, sizes.fields, device.fields, recipe), recipe, policy.name)
    owned = owned_grpo_fields(run_dir, policy.name, config.grpo, policy.grpo)
    # The one merge, each over the ones before it (no two stages decide the same field), then what a stage dropped.
    grpo = {**regime_fields, **config.grpo, **policy.grpo, **device.fields, **length.fields, **sizes.fields, **counts,
            **keep.fields, **owned}
    for key in (*device.dropped, *sizes.dropped):
        grpo.pop(key, None)
    notes = [*device.notes, *sizes.notes, *cadence_notes, *keep.notes,
             *engine_note(policy.name, planned_engine(grpo, launch)), *remote_code_note(policy.name, policy.model, grpo)]
    prompts = train_prompts if train_prompts is not None else known_train_prompts(config.task)
    epoch_steps = None if prompts is None else optimizer_steps_per_epoch(grpo, placed.world_size, prompts)
    schedule_rows = describe(cadence, grpo, validation_interval(cadence, config.validation.every_steps),
                             prompts, epoch_steps)
    return grpo, derived, notes, [list(row) for row in schedule_rows]


def builtin_pool_on_gpus(plans: list[PolicyPlan]) -> list[str]:
    """The README's figures are a CPU run of the builtin pool: one process a policy, float32. On GPUs each rank takes
    the recipe's per-device batch in bf16, another run: said, with how to train the README's."""
    if not plans or not all(p.model.startswith("builtin:") and p.placement.device_type == "cuda" for p in plans):
        return []
    ranks = ", ".join(f"{p.name} {p.placement.num_processes} rank(s) x {p.grpo.get('per_device_train_batch_size')} "
                      f"completions" for p in plans)
    return [f"the builtin pool on GPUs trains another run than the README's figures (a CPU run: one process a "
            f"policy, float32): here {ranks} a step, bf16 {'on' if any(p.grpo.get('bf16') for p in plans) else 'off'}; "
            f"CUDA_VISIBLE_DEVICES= mutualrl train ... trains the README's run"]


def _known_context(model: str) -> int | None:
    """The positions ``model`` attends to, where its config is on this machine (None: not known here)."""
    from mutualrl.pools.loading import model_context

    known = model_context(model)
    return known[0] if known else None


def _policy_batch(recipe: Mapping[str, Any], batch: BatchConfig | None, placement: Placement,
                  name: str) -> tuple[GRPODecision, DerivedBatch | None]:
    """The batch fields decided for policy ``name``'s world size: derived from ``batch``, or without it the recipe's
    per-device batch split over its CPU ranks; raises :class:`BatchSizeError` naming an explicit device map."""
    placed = placement.of(name)
    try:
        sizes, derived = apply_batch(recipe, batch, placed.world_size, name)
    except BatchSizeError as err:
        if placement.explicit:
            raise BatchSizeError(f"{err} (the explicit --device-map sets this device count)") from None
        raise
    if batch is None and placed.device_type == "cpu":
        sizes = split_across_cpu_ranks(recipe, placed.num_processes, name)
    return sizes, derived


def _plan_policy(
    config: RunConfig,
    index: int,
    placement: Placement,
    launches: list[LaunchSpec],
    run_dir: Path,
    vllm_available: bool | None,
    addresses: dict[int, str] | None,
    train_prompts: int | None = None,
) -> PolicyPlan:
    """Everything for pool policy ``index``: its GRPO fields, accelerate / DeepSpeed files and commands."""
    launch, policy = config.launch, config.pool.policies[index]
    placed, spec = placement.of(policy.name), launches[0]
    grpo, derived, notes, schedule = _policy_grpo(config, index, placement, run_dir, vllm_available, train_prompts)
    meet = machine_address(placed.machines[0], launch.main_address, addresses)
    port = policy_port(config, index)
    stage = ZERO_STAGES[launch.deepspeed]
    ds_path = RunPaths(run_dir).deepspeed_config(policy.name) if stage else None
    return PolicyPlan(
        name=policy.name,
        model=policy.model,
        placement=placed,
        grpo=grpo,
        batch=derived,
        deepspeed=launch.deepspeed,
        main_process_port=port,
        accelerate_config_path=str(RunPaths(run_dir).accelerate_config(policy.name)),
        accelerate_config=accelerate_config(
            placed,
            deepspeed=launch.deepspeed,
            mixed_precision=mixed_precision_of(grpo),
            main_process_port=port,
            # exactly what the launcher puts in CUDA_VISIBLE_DEVICES (see configs.py)
            gpu_ids=spec.env.get("CUDA_VISIBLE_DEVICES") or None,
            deepspeed_file=ds_path,
            main_process_ip=None if meet == ADDRESS_PLACEHOLDER.format(machine=placed.machines[0]) else meet,
        ),
        deepspeed_config_path=str(ds_path) if ds_path else None,
        deepspeed_config=(
            deepspeed_config(stage, bf16=bool(grpo.get("bf16")), fp16=bool(grpo.get("fp16"))) if stage else None
        ),
        launch=spec,
        notes=[*notes, *spec.notes],
        schedule=schedule,
        launches=launches if launch.nodes > 1 else [],
    )

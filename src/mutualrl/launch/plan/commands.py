"""Launch commands and environments, one process group per policy.

Several DeepSpeed engines in one Python process share global state and break
(accelerate#3170, transformers#35073), so every policy runs as its own process group:

- GPU: ``python -m mutualrl.host.accelerate_launch`` (= ``accelerate launch``, its stop signals left to the ranks:
  training/stop_request.py) with the
  policy's accelerate config, ``--num_processes N`` and its own rendezvous port, running
  ``-m mutualrl.training.worker --run-dir RUN --policy NAME``, with
  ``CUDA_VISIBLE_DEVICES`` set to the policy's GPUs.
- CPU: ``python -m mutualrl.training.worker ...`` directly, ``CUDA_VISIBLE_DEVICES=""``,
  ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` = the policy's threads, and with DeepSpeed the
  single-process launcher environment DeepSpeed needs (verified end to end, see
  docs/launch.md "CPU DeepSpeed").
- Both: glibc's allocator told to keep a step's large buffers for reuse (:mod:`mutualrl.host.allocator`), unless the
  user set those variables.
- Several machines (``launch.nodes``): a policy has one command per machine it runs on;
  one whose ranks span machines adds accelerate's ``--num_machines --machine_rank
  --main_process_ip --gpu_ids`` (torchrun's ``--nnodes --node_rank --master_addr`` on CPU),
  meeting at its first machine on its own port.

:class:`LaunchSpec` ``env`` is an overlay: the runtime starts the child with
``{**os.environ, **spec.env}``.

Device adaptations of a GPU recipe's GRPO fields (bf16, vLLM: CUDA-only settings on a CPU) are made in one place,
:func:`adapt_grpo_to_device`, so that a CPU run never fails because a recipe asked for
GPU features.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mutualrl.assets.deepspeed_ops import torch_extensions_dir
from mutualrl.config.recorded_code import allowed_code_env, named_modules
from mutualrl.config.schema import RunConfig
from mutualrl.errors import PlacementError
from mutualrl.host.allocator import allocator_env
from mutualrl.launch.plan.configs import ZERO_STAGES
from mutualrl.launch.plan.grpo_decisions import GRPODecision
from mutualrl.launch.plan.machines import local_devices
from mutualrl.launch.plan.mwra import Placement, PolicyPlacement
from mutualrl.run_folder import RunPaths
from mutualrl.tasks.shipped_rewards import shipped_env, shipped_files
from mutualrl.training.stop_request import rank_agent_env
from mutualrl.training.trackers import tracker_group_env

WORKER_MODULE = "mutualrl.training.worker"
ACCELERATE_LAUNCH_MODULE = "mutualrl.host.accelerate_launch"  # accelerate launch, stop signals left to the ranks


@dataclass
class LaunchSpec:
    """How to start one policy's process group."""

    policy: str
    argv: list[str]
    env: dict[str, str]
    """Variables to set on top of the parent's environment."""
    cwd: str
    log_path: str
    """stdout and stderr of the whole group go here."""
    notes: list[str] = field(default_factory=list)
    machine: int = 0
    """The machine that runs this command (``launch.nodes`` > 1)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def vllm_importable() -> bool:
    return importlib.util.find_spec("vllm") is not None


def resolve_vllm(
    grpo: Mapping[str, Any], placed: PolicyPlacement, vllm_available: bool | None = None
) -> GRPODecision:
    """The vLLM fields decided for where ``grpo`` (the recipe's fields) runs: generation kept only where it can run,
    else turned off with a note saying why.

    GPU: the ``vllm`` module importable (``vllm_available`` overrides: a simulated node).
    CPU: a usable CPU build of vLLM (:func:`~mutualrl.host.vllm_cpu.cpu_blocker`), colocate or
    server mode, with the CUDA-only settings replaced (:func:`~mutualrl.host.vllm_cpu.adapt_cpu_vllm`).
    """
    if not grpo.get("use_vllm"):
        return GRPODecision()
    mode = grpo.get("vllm_mode", "colocate")
    if placed.device_type != "cuda":
        from mutualrl.host import vllm_cpu

        blocker = vllm_cpu.cpu_blocker()
        if blocker is not None:
            return GRPODecision({"use_vllm": False}, notes=[
                f"{placed.name}: vLLM generation turned off on the CPU: {blocker}; generation uses transformers"])
        if mode == "colocate":
            fields, cpu_notes = vllm_cpu.adapt_cpu_vllm(grpo, placed.name)
            return GRPODecision(fields, notes=[
                f"{placed.name}: vLLM on the CPU ({vllm_cpu.installed_build().describe()}), colocate: "
                f"an engine in each of the policy's {placed.num_processes} process(es), KV cache "
                f"{vllm_cpu.KV_ENV} sized at start from the model and batch", *cpu_notes])
    else:
        available = vllm_importable() if vllm_available is None else vllm_available
        if not available:
            return GRPODecision({"use_vllm": False}, notes=[
                f"{placed.name}: vLLM generation turned off: `vllm` is not installed (pip install 'mutualrl[vllm]'); "
                f"generation uses transformers, which is much slower"])
    if mode == "colocate":
        tp = int(grpo.get("vllm_tensor_parallel_size", 1) or 1)
        if placed.num_processes % tp:
            raise PlacementError(
                f"{placed.name}: grpo.vllm_tensor_parallel_size ({tp}) must divide the policy's "
                f"{placed.num_processes} GPU process(es) in vLLM colocate mode"
            )
    elif mode == "server":
        return GRPODecision(notes=[
            f"{placed.name}: vLLM server mode: start `trl vllm-serve` for this policy yourself "
            f"(grpo.vllm_server_base_url / vllm_server_port); mutualrl only launches the trainers"])
    return GRPODecision()


def adapt_grpo_to_device(
    grpo: Mapping[str, Any],
    placed: PolicyPlacement,
    deepspeed: str = "none",
    vllm_available: bool | None = None,
) -> GRPODecision:
    """The GRPOConfig fields decided by where a policy runs, for ``grpo`` (the recipe's fields), with notes.

    CPU: ``bf16``/``fp16`` off (TRL defaults to bf16, which fails on a CPU), ``tf32`` dropped,
    ``use_cpu=True`` (DeepSpeed still engages through the launcher environment, verified),
    vLLM kept only with a usable CPU build. GPU: vLLM kept only if importable (:func:`resolve_vllm`), ``bf16``
    explicit where the recipe leaves it unset (TRL's default: a DeepSpeed JSON saying bf16 off next to
    GRPOConfig's bf16 on fails transformers' ``HfTrainerDeepSpeedConfig`` check).
    """
    vllm = resolve_vllm(grpo, placed, vllm_available)
    fields, notes = dict(vllm.fields), list(vllm.notes)
    if placed.device_type == "cpu":
        for key in ("bf16", "fp16"):
            if grpo.get(key):
                notes.append(f"{placed.name}: grpo.{key} turned off on the CPU (training runs in fp32)")
            fields[key] = False
        if grpo.get("tf32"):
            notes.append(f"{placed.name}: grpo.tf32 dropped on the CPU")
        fields["use_cpu"] = True
        return GRPODecision(fields, dropped=("tf32",), notes=notes)
    if grpo.get("bf16") is None:  # TRL's own default (trl/trainer/base_config.py): made explicit, so that the
        fields["bf16"] = not grpo.get("fp16")  # DeepSpeed JSON and accelerate's mixed_precision say what GRPOConfig does
    if grpo.get("use_cpu"):
        notes.append(f"{placed.name}: grpo.use_cpu turned off: the policy is placed on GPU(s)")
        fields["use_cpu"] = False
    if fields.get("use_vllm", grpo.get("use_vllm")) and "vllm_importance_sampling_correction" not in grpo:
        notes.append(f"{placed.name}: {GPU_VLLM_CORRECTION}")
    return GRPODecision(fields, notes=notes)


GPU_VLLM_CORRECTION = ("grpo.vllm_importance_sampling_correction unset: TRL's default on a GPU is on (mode "
                       "sequence_mask, cap 3: a rollout whose trainer/sampler sequence ratio exceeds 3 gets weight 0), "
                       "while the CPU plan turns it off; set it (false: the paper's objective) to train one objective "
                       "on both")
"""The difference between a GPU and a CPU plan of a recipe that leaves TRL's vLLM correction unset (docs/reproduce.md,
"TRL's vLLM correction")."""


def visible_devices(devices: tuple[int, ...] | list[int], parent_mask: str | None) -> str:
    """The child's ``CUDA_VISIBLE_DEVICES`` for parent-logical GPU ids.

    If the parent itself runs under a mask (``CUDA_VISIBLE_DEVICES=2,3,5,7``), logical id
    ``i`` is the mask's i-th entry; the child gets those entries, not ``i``.
    """
    if parent_mask is None or parent_mask.strip() == "":
        return ",".join(str(d) for d in devices)
    entries = [e.strip() for e in parent_mask.split(",") if e.strip()]
    missing = [d for d in devices if d >= len(entries)]
    if missing:
        raise PlacementError(
            f"GPU id(s) {missing} are not visible: this process runs with CUDA_VISIBLE_DEVICES={parent_mask} "
            f"({len(entries)} GPU(s)); use ids 0..{len(entries) - 1} or lower --gpus"
        )
    return ",".join(entries[d] for d in devices)


def policy_port(config: RunConfig, index: int) -> int:
    return int(config.launch.main_process_port) + index


def launch_dir(run_dir: Path) -> Path:
    """Where workers start: the folder ``mutualrl train`` was started from (relative paths of the recipe are
    read from there), or the run folder when that one was deleted during start-up (the CLI refuses to start
    from a deleted folder; later, the run goes on from its own folder rather than fail)."""
    try:
        return Path.cwd()
    except FileNotFoundError:
        return run_dir


def build_machine_specs(
    config: RunConfig,
    placement: Placement,
    run_dir: Path,
    python: str = sys.executable,
    parent_visible_devices: str | None = None,
    cwd: Path | None = None,
    machine: int = 0,
    addresses: Mapping[int, str] | None = None,
) -> list[list[LaunchSpec]]:
    """Per policy (pool order), one :class:`LaunchSpec` for each machine it runs on (``placed.machines``).

    ``machine`` is the machine planning: ``parent_visible_devices`` applies to its commands only
    (another machine's are shown with plain ids). ``addresses``: {machine: address} of machines
    other than 0, known once they joined the run; a policy whose ranks span machines meets at its
    first machine (machine 0: ``launch.main_address``), else a placeholder is shown.
    """
    run_dir = Path(run_dir).resolve()
    cwd = Path(cwd or launch_dir(run_dir)).resolve()
    if parent_visible_devices is None:
        parent_visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    out = []
    for index, policy in enumerate(config.pool.policies):
        placed = placement.of(policy.name)
        out.append([
            _spec(config, index, placed, placement.gpus, run_dir, python, cwd, where,
                  parent_visible_devices if where == machine else "", addresses)
            for where in placed.machines
        ])
    return out


def machine_address(machine: int, main_address: str, addresses: Mapping[int, str] | None = None) -> str:
    """Where ranks meet when a policy's first machine is ``machine``."""
    if machine == 0:
        return main_address
    return (addresses or {}).get(machine) or ADDRESS_PLACEHOLDER.format(machine=machine)


ADDRESS_PLACEHOLDER = "<address of machine {machine}>"


def _spec(config: RunConfig, index: int, placed: PolicyPlacement, gpus: int, run_dir: Path, python: str, cwd: Path,
          machine: int, parent_mask: str | None, addresses: Mapping[int, str] | None) -> LaunchSpec:
    name = placed.name
    deepspeed = config.launch.deepspeed
    port = policy_port(config, index)
    worker = ["-m", WORKER_MODULE, "--run-dir", str(run_dir), "--policy", name]
    env = worker_env(config, index, run_dir)
    policy = config.pool.policies[index]
    notes: list[str] = []
    machines = placed.machines
    group: list[str] = []  # where the policy's ranks meet when they span machines
    if len(machines) > 1:
        group = ["--master_addr", machine_address(machines[0], config.launch.main_address, addresses)]
    per_machine = placed.processes_per_machine
    threads = max(1, placed.cpu_threads // per_machine)
    env.update(tokenizer_env(threads, {**config.grpo, **policy.grpo}.get("dataloader_num_workers") or 0, os.environ))
    if placed.device_type == "cuda":
        visible = visible_devices(local_devices(placed, machine, gpus), parent_mask)
        env.update(CUDA_VISIBLE_DEVICES=visible, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        if placed.num_processes == 1:  # accelerate sets MASTER_PORT for several processes only; a colocated vLLM
            # engine's one-rank group would take TRL's first free port (29500), which policies starting together
            # all find free (trl.trainer.utils.ensure_master_addr_port): the policy's own port instead
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        spanning = ["--num_machines", str(len(machines)), "--machine_rank", str(machines.index(machine)),
                    "--main_process_ip", group[1], "--gpu_ids", visible] if group else []
        env.update(rank_agent_env())  # accelerate runs torchrun's agent for several ranks and for DeepSpeed
        argv = [
            python, "-m", ACCELERATE_LAUNCH_MODULE,
            "--config_file", str(RunPaths(run_dir).accelerate_config(name)),
            "--num_processes", str(placed.num_processes),
            *spanning,
            "--main_process_port", str(port),
            *worker,
        ]  # fmt: skip
    else:
        env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        if deepspeed != "none":
            env.update(cpu_deepspeed_env(RunPaths(run_dir).deepspeed_config(name), deepspeed, port, placed.num_processes))
            notes.append(
                f"{name}: DeepSpeed {deepspeed} on the CPU ({placed.num_processes} rank(s), launcher variables set by "
                f"mutualrl); DeepSpeed's CPU ops compiled once into {env['TORCH_EXTENSIONS_DIR']} (by the set-up's "
                f"`mutualrl assets fetch`, else by the first run)"
            )
        elif placed.num_processes == 1:  # a colocated vLLM engine's one-rank group: the worker picks a free port,
            env.update(MASTER_PORT="auto")  # never one the launcher's shell exported (shared by every policy)
        if placed.num_processes > 1:
            # accelerate launches several CPU ranks only through mpirun; torchrun sets RANK/WORLD_SIZE/...
            # and accelerate then runs MULTI_CPU over gloo.
            if deepspeed == "none":  # with DeepSpeed, accelerate takes the CPU from DS_ACCELERATOR
                env["ACCELERATE_USE_CPU"] = "true"
            nodes = ["--nnodes", str(len(machines)), "--node_rank", str(machines.index(machine))] if group else []
            env.update(rank_agent_env())
            argv = [python, "-m", "torch.distributed.run", *nodes, "--nproc_per_node", str(per_machine),
                    *(group or ["--master_addr", "127.0.0.1"]), "--master_port", str(port), *worker]
        else:
            argv = [python, *worker]
    log = f"{name}.log" if machine == machines[0] else f"{name}.machine-{machine}.log"
    return LaunchSpec(policy=name, argv=argv, env=env, cwd=str(cwd), log_path=str(RunPaths(run_dir).logs / log),
                      notes=notes, machine=machine)


def worker_env(config: RunConfig, index: int, run_dir: Path) -> dict[str, str]:
    """What every process of policy ``index`` runs with, on any device: this mutualrl, the allocator, the run's
    trackers, its shipped reward files, the user code its command accepted, DeepSpeed's compiled ops."""
    # PYTHONPATH: the policy processes run the same mutualrl as the parent, installed or not.
    # PYTHONSAFEPATH: `python -m` (the worker, accelerate launch and every rank torchrun starts) puts no working
    # directory on sys.path, so a module there cannot shadow a library's; the user's modules the command names are
    # imported from it by name (config/plugins.py), which then leaves it behind every library for their own imports.
    env = {"PYTHONUNBUFFERED": "1", "PYTHONPATH": package_path(), "PYTHONSAFEPATH": "1"}
    env.update(allocator_env(os.environ))  # reuse a step's large buffers; a user's own settings are inherited
    policy = config.pool.policies[index]
    env.update(tracker_group_env({**config.grpo, **policy.grpo}.get("report_to"), run_dir.name, os.environ))
    env.update(shipped_env(shipped_files(config.task.reward_funcs, RunPaths(run_dir).shipped_rewards)))
    # the worker reads config.yaml, which is data: it imports the code this launcher's command accepted, no other
    env.update(allowed_code_env(m for m, _ in named_modules(config.task.reward_funcs, config.plugins or [],
                                                            config.task.name)))
    if config.launch.deepspeed != "none":
        env["TORCH_EXTENSIONS_DIR"] = str(torch_extensions_dir())
    return env


def tokenizer_env(threads: int, dataloader_workers: int, environ: Mapping[str, str]) -> dict[str, str]:
    """How a rank's Hugging Face tokenizer (THL's retokenization of peer text: PRP's and SGT's host work) uses its
    cores: its Rayon pool on the rank's ``threads`` where it has several and no data-loader worker process copies
    the rank after the pool is used (the copy inherits a pool without threads, and tokenizers keeps an explicit
    ``true``);
    otherwise one thread. A ``TOKENIZERS_PARALLELISM`` in the user's environment is inherited unchanged."""
    if "TOKENIZERS_PARALLELISM" in environ:
        return {}
    if threads > 1 and int(dataloader_workers) == 0:
        return {"TOKENIZERS_PARALLELISM": "true", "RAYON_NUM_THREADS": str(threads)}
    return {"TOKENIZERS_PARALLELISM": "false"}


def package_path() -> str:
    """The folder holding the ``mutualrl`` package, ahead of any inherited PYTHONPATH (found from a module at the
    package's top that imports nothing: the package's ``__init__`` sits above every layer, beside the API)."""
    from mutualrl import release

    src = str(Path(release.__file__).resolve().parents[1])
    inherited = os.environ.get("PYTHONPATH", "")
    return src + (os.pathsep + inherited if inherited else "")


def cpu_deepspeed_env(ds_config: Path, deepspeed: str, port: int, ranks: int = 1) -> dict[str, str]:
    """What a CPU worker needs for DeepSpeed without a launcher.

    - ``RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT``: the variables
      torchrun would set; without them ``deepspeed.init_distributed`` falls back to MPI
      discovery and fails asking for mpi4py.
    - ``ACCELERATE_USE_DEEPSPEED`` + ``ACCELERATE_DEEPSPEED_CONFIG_FILE`` (+ ZeRO-3 init flag):
      what ``accelerate launch`` would export; transformers' ``TrainingArguments`` builds
      its ``DeepSpeedPlugin`` from them.
    - ``DS_ACCELERATOR=cpu``: no accelerator probing.
    """
    single = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    return {
        **(single if ranks == 1 else {}),  # several ranks: torchrun sets these per rank
        "ACCELERATE_USE_DEEPSPEED": "true",
        "ACCELERATE_DEEPSPEED_CONFIG_FILE": str(ds_config),
        "ACCELERATE_DEEPSPEED_ZERO3_INIT": "true" if ZERO_STAGES[deepspeed] == 3 else "false",
        "DS_ACCELERATOR": "cpu",
    }

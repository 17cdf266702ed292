"""What the runs of a cluster sweep need from each array task: GPUs, and the asset cache they were planned with.

- **GPUs**: a run uses ``launch.gpus`` GPUs when its settings say so (or as many as its ``launch.device_map``
  names), else every GPU its machine shows (``mutualrl train``'s placement, :mod:`mutualrl.launch.plan`). A pool
  whose settings only a GPU serves as meant (``launch.deepspeed``, ``grpo.use_vllm``, ``grpo.bf16``/``fp16``: the
  GPU recipes) but which names no count leaves the count to the submission: ``--slurm-gpus`` must then be given.
- **Host memory**: the host RAM each run's plan needs on a node of the task's GPUs (the dry run's "Host RAM" line,
  :mod:`mutualrl.launch.plan.host_memory`: the processes' baseline, loading the weights, a checkpoint save), the
  largest of the runs plus a margin, asked as ``--mem`` unless ``--slurm-mem`` is given (below the need: refused);
  a CPU pool's is left to the partition's default.
- **Time and CPUs**: each run's plan estimates its time on the task's GPUs (the dry run's "Run time" line,
  :mod:`mutualrl.launch.plan.run_time`); ``--slurm-time`` not given asks for the slowest run's high estimate plus
  :data:`TIME_MARGIN`, ``--slurm-cpus`` not given :data:`CPUS_PER_GPU_RANK` a GPU rank; a value given below either is
  kept and said (a run cut by its time limit resumes when the same sweep is submitted again).
- **The asset cache** (``$MUTUALRL_CACHE``): the folder the sweep was submitted with, and the assets there the runs
  read (the ``builtin:`` models, e.g. ``models/tiny-bpe-<hash>``), are recorded in ``sweep.json``; each array task
  checks the cache it would use before its run starts (:func:`task_cache_env`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mutualrl.assets.cache import CACHE_VARIABLE, cache_dir, cache_root
from mutualrl.errors import UsageError



def run_configs(spec: Any) -> list[Any]:
    """One resolved config per regime x grid setting of ``spec`` (a seed changes neither GPUs nor assets)."""
    from mutualrl.launch.sweep.grid import resolved_config

    seen: dict[tuple[str, tuple[str, ...]], Any] = {}
    for point in spec.points():
        key = (point.regime, point.sets)
        if key not in seen:
            seen[key] = resolved_config(spec, point)
    return list(seen.values())


def gpu_settings(config: Any) -> list[str]:
    """The settings of ``config`` that put a run on GPUs (empty: a CPU run)."""
    grpo = [config.grpo, *[policy.grpo for policy in config.pool.policies]]
    found = [f"launch.deepspeed={config.launch.deepspeed}"] if config.launch.deepspeed != "none" else []
    for key in ("use_vllm", "bf16", "fp16"):
        if any(fields.get(key) for fields in grpo):
            found.append(f"grpo.{key}=true")
    return found


def gpu_need(config: Any) -> int | None:
    """GPUs one run of ``config`` asks for: ``launch.gpus``, else the device map's, else 0 for a CPU run; None: a
    GPU run that takes whatever its machine shows."""
    launch = config.launch
    if launch.nodes > 1:
        raise UsageError(f"mutualrl sweep --slurm: launch.nodes={launch.nodes}: each array task is one machine; run a "
                         "pool over several machines with examples/slurm/two-nodes.sbatch")
    if launch.gpus is not None:
        return launch.gpus
    if launch.device_map:
        return 1 + max((device for devices in launch.device_map.values() for device in devices), default=-1)
    return None if gpu_settings(config) else 0


def task_gpus(configs: list[Any], given: int | None, pool: str) -> int:
    """``--slurm-gpus`` checked against what the runs ask for; when not given, what they ask for. A GPU pool that
    names no count, or fewer GPUs than a run asks for, is refused in one line naming the option."""
    needs = [(gpu_need(config), config) for config in configs]
    wanted = max((need for need, _ in needs if need is not None), default=0)
    open_ended = [config for need, config in needs if need is None]
    why = ", ".join(gpu_settings(open_ended[0])) if open_ended else ""
    if given is None and open_ended:
        raise UsageError(f"--slurm-gpus: the runs of pool {pool} train on GPUs ({why}) and name no count; give "
                         "--slurm-gpus N (each run uses every GPU its task gets) or --set launch.gpus=N")
    if given is None:
        return wanted
    if given < wanted:
        raise UsageError(f"--slurm-gpus {given}: the runs ask for {wanted} GPUs each (launch.gpus or "
                         f"launch.device_map); give --slurm-gpus {wanted} or more")
    if given == 0 and open_ended:
        raise UsageError(f"--slurm-gpus 0: the runs of pool {pool} train on GPUs ({why}); give --slurm-gpus N "
                         "(N >= 1), or --set launch.gpus=0 to run them on CPUs")
    return given


def host_need_gib(configs: list[Any], gpus: int, folder: Path) -> float | None:
    """The most host RAM (GiB) one run of ``configs`` needs, planned as ``train --dry-run --gpus GPUS`` plans it;
    None: CPU runs, or no policy's size is known."""
    import dataclasses

    from mutualrl.config.typed import ConfigError
    from mutualrl.errors import MutualRLError
    from mutualrl.launch.run import plan_without_launch

    needs = []
    for config in configs:
        config = dataclasses.replace(config, launch=dataclasses.replace(config.launch, gpus=gpus))
        try:
            host = plan_without_launch(config, folder).host
        except (ConfigError, MutualRLError):  # the sweep's own check refuses it, naming the run (sweep.check_point)
            continue
        if host is not None and host.policies:
            needs.append(host.need_gib)
    return max(needs, default=None)


def task_mem_gb(configs: list[Any], gpus: int, given: int | None, folder: Path) -> int | None:
    """``--slurm-mem`` checked against the host RAM the runs need (``given`` below it is refused in one line, unless
    the runs set ``launch.force``); not given: that need plus the margin, in whole GB (Slurm's ``G``: 1024^3 bytes);
    None: the partition's default (a CPU pool, or sizes unknown)."""
    from mutualrl.launch.plan.host_memory import slurm_mem_gb

    need = host_need_gib(configs, gpus, folder) if gpus else None
    if need is None:
        return given
    if given is None:
        return slurm_mem_gb(need)
    if given < need and not any(config.launch.force for config in configs):
        raise UsageError(f"--slurm-mem {given}: a run of the sweep needs about {need:.1f} GiB of host RAM on a node of "
                         f"{gpus} GPUs (the Host RAM line of `mutualrl train --dry-run --gpus {gpus}`); give "
                         f"--slurm-mem {slurm_mem_gb(need)} or leave it out (then asked for), or --set "
                         "launch.force=true")
    return given


def needed_assets(configs: list[Any]) -> list[str]:
    """The cache folders (relative to the cache) of the ``builtin:`` models the runs read."""
    from mutualrl.pools.builtin import get_builtin
    from mutualrl.pools.loading import BUILTIN_PREFIX

    root = cache_dir()
    names = sorted({policy.model[len(BUILTIN_PREFIX):] for config in configs for policy in config.pool.policies
                    if policy.model.startswith(BUILTIN_PREFIX)})
    return [str(get_builtin(name).folder().relative_to(root)) for name in names]


def cache_record(configs: list[Any]) -> dict[str, Any]:
    """``sweep.json``'s ``cache``: the asset cache this process uses, the assets the runs read, those it lacks."""
    root = cache_dir()
    assets = needed_assets(configs)
    return {"folder": str(root), "assets": assets, "missing": [a for a in assets if not (root / a).exists()]}


def cache_line(record: Mapping[str, Any]) -> str:
    """What the submission says of the cache its array tasks will use."""
    where = f"asset cache {record['folder']} ({CACHE_VARIABLE}; each array task uses it, or refuses another " \
            "that lacks the runs' assets)"
    if record["missing"]:
        return (f"{where}: it lacks {', '.join(record['missing'])}, which the first task builds there (minutes); "
                "`mutualrl assets fetch` builds them once beforehand")
    return f"{where}: it holds the runs' assets ({', '.join(record['assets']) or 'none needed'})"


def task_cache_env(record: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """An array task's environment for its run, and a line to say (None: nothing to say).

    No ``$MUTUALRL_CACHE``: the sweep's cache is set. Another folder that holds every asset the runs read is used
    (said); one that lacks any is refused (``UsageError``, one line), and so is the sweep's own folder when this
    machine does not have it. The sweep's folder lacking an asset: the task builds it there (said)."""
    recorded = Path(record["folder"])
    env = dict(environ)
    given = environ.get(CACHE_VARIABLE)
    if not given:
        env[CACHE_VARIABLE] = str(recorded)
    folder = cache_root(environ) if given else recorded
    lacking = [asset for asset in record.get("assets", []) if not (folder / asset).exists()]
    same = os.path.realpath(folder) == os.path.realpath(recorded)
    if not same and lacking:
        raise UsageError(f"{CACHE_VARIABLE}={given} is not the sweep's asset cache {recorded} and lacks "
                         f"{', '.join(lacking)}: unset it in the job's environment (the task then uses {recorded}) "
                         "or point it at that folder")
    if not same:
        return env, f"{CACHE_VARIABLE}={given}, not the sweep's asset cache {recorded}: it holds the runs' assets"
    if lacking and not recorded.is_dir():
        raise UsageError(f"the sweep's asset cache {recorded} is not on this machine: put it on a filesystem the "
                         f"nodes share, or set {CACHE_VARIABLE} to a cache here holding {', '.join(lacking)}")
    if lacking:
        return env, f"the asset cache {recorded} lacks {', '.join(lacking)}: this task builds them there (minutes)"
    return env, None


DEFAULT_TIME_MIN = 240
"""``--slurm-time`` where no run's time is estimated (a CPU pool, sizes unknown)."""

DEFAULT_CPUS = 4
"""``--slurm-cpus`` of a CPU pool's task."""

CPUS_PER_GPU_RANK = 4
"""CPU cores a GPU rank keeps busy: its trainer process, its colocated vLLM engine's scheduler and detokenizer, and the
reward function; 8 ranks: 32, as examples/slurm asks for."""

TIME_MARGIN = 0.1
"""Asked on top of the slowest run's high estimate."""


def fit_time_and_cpus(options: Any, plans: list[Any]) -> tuple[Any, list[str]]:
    """``options`` (SlurmOptions) with the time limit and CPUs the runs' ``plans`` need where not given, and a line
    for each given value below that need."""
    import dataclasses
    import math

    high_s = max((p.run_time.run_s[1] for p in plans if p.run_time is not None and p.run_time.run_s), default=None)
    ranks = max((sum(q.placement.num_processes for q in p.policies if q.placement.device_type == "cuda")
                 for p in plans), default=0)
    need_min = None if high_s is None else math.ceil(high_s * (1 + TIME_MARGIN) / 60)
    need_cpus = ranks * CPUS_PER_GPU_RANK or None
    notes = []
    time_min, cpus = options.time_min, options.cpus_per_task
    if time_min is None:
        time_min = need_min or DEFAULT_TIME_MIN
    elif need_min is not None and time_min < need_min:
        notes.append(f"--slurm-time {time_min}: a run may need up to {need_min} min (the high end of the Run time line "
                     f"of `mutualrl train --dry-run`, +{TIME_MARGIN:.0%}); a run its limit stops resumes when the same "
                     "sweep is submitted again")
    if cpus is None:
        cpus = max(DEFAULT_CPUS, need_cpus or 0)
    elif need_cpus is not None and cpus < need_cpus:
        notes.append(f"--slurm-cpus {cpus}: a run's {ranks} GPU ranks keep about {need_cpus} cores busy "
                     f"({CPUS_PER_GPU_RANK} a rank: trainer, vLLM engine, reward function); give --slurm-cpus "
                     f"{need_cpus}")
    return dataclasses.replace(options, time_min=time_min, cpus_per_task=cpus), notes

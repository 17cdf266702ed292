"""``mutualrl train`` end to end: resolve the recipe, prepare, plan (MWRA), launch, watch, summarise."""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from mutualrl.config.loader import load_run_config
from mutualrl.config.schema import RunConfig
from mutualrl.config.typed import to_plain
from mutualrl.errors import UsageError
from mutualrl.training.paths import RunPaths, atomic_write_json, atomic_write_text, read_json


@dataclass
class TrainOptions:
    pool: str = "tiny"
    regime: str | None = None
    prp_denominator: str | None = None
    output_dir: Path | None = None
    max_steps: int | None = None
    seed: int | None = None
    overrides: list[str] = field(default_factory=list)
    gpus: int | None = None
    device_map: str | None = None
    dry_run: bool = False
    resume: bool = False
    overwrite: bool = False
    baseline: str | None = None  # also train this regime on the same seed and settings, then compare


def resolve_config(options: TrainOptions) -> tuple[RunConfig, str]:
    """Recipe + ``--set`` overrides + the dedicated CLI options (which win)."""
    overrides = list(options.overrides)
    if options.max_steps is not None:
        overrides.append(f"grpo.max_steps={options.max_steps}")
    if options.seed is not None:
        overrides.append(f"grpo.seed={options.seed}")
    if options.prp_denominator is not None:
        overrides.append(f"regime.prp.denominator={options.prp_denominator}")
    if options.gpus is not None:
        overrides.append(f"launch.gpus={options.gpus}")
    if options.output_dir is not None:
        overrides.append(f"output_dir={json.dumps(str(options.output_dir))}")
    if options.device_map is not None:
        from mutualrl.launch.mwra import parse_device_map

        overrides.append(f"launch.device_map={json.dumps(parse_device_map(options.device_map))}")
    loaded = load_run_config(options.pool, overrides=overrides, regime=options.regime)
    return loaded.config, loaded.source


def run_dir_for(config: RunConfig) -> Path:
    return Path(config.output_dir.format(pool=config.pool.name, regime=config.regime.name)).resolve()


def baseline_options(options: TrainOptions, run_dir: Path) -> TrainOptions:
    """The same run with ``options.baseline`` as its regime, in the sibling folder ``<run>-<baseline>``."""
    from dataclasses import replace

    return replace(options, regime=options.baseline, prp_denominator=None, baseline=None,
                   output_dir=run_dir.with_name(f"{run_dir.name}-{options.baseline}"))


def run_train(options: TrainOptions, console: Console | None = None) -> int:
    """Train the pool; with ``options.baseline`` also train the baseline regime and print both side by side."""
    console = console or Console()
    if options.baseline is None:
        return train_one(options, console)
    config, _ = resolve_config(options)
    if config.regime.name == options.baseline:
        raise UsageError(f"--baseline {options.baseline}: the run itself uses regime {options.baseline!r}; "
                         "pick a different regime for the run or the baseline")
    run_dir = run_dir_for(config)
    base = baseline_options(options, run_dir)
    if options.dry_run:
        console.print(f"--baseline {options.baseline}: would then train {base.output_dir} with the same settings",
                      highlight=False)
        return train_one(options, console)
    if not options.resume and not options.overwrite and base.output_dir.exists() and any(base.output_dir.iterdir()):
        raise UsageError(f"baseline run folder {base.output_dir} already exists: use --resume to continue both "
                         "runs, --overwrite to start both again, or --output-dir for a new pair")
    code = train_one(options, console)
    if code != 0:
        return code
    console.print(f"[bold]baseline:[/] the same pool, seed and settings with regime {options.baseline}",
                  highlight=False)
    code = train_one(base, console)
    if code != 0:
        return code
    from mutualrl.launch.summary import compare_summaries, print_comparison

    paths, base_paths = RunPaths(run_dir), RunPaths(base.output_dir.resolve())
    comparison = compare_summaries(read_json(paths.summary), read_json(base_paths.summary))
    atomic_write_json(paths.root / "comparison.json", comparison)
    print_comparison(comparison, console)
    return 0


def train_one(options: TrainOptions, console: Console) -> int:
    config, source = resolve_config(options)
    paths = RunPaths(run_dir_for(config))
    if options.dry_run:
        from mutualrl.launch.plan import make_launch_plan, render_plan

        # --gpus with --dry-run simulates a node of that size (nothing is detected).
        simulate = config.launch.gpus is not None
        # On a simulated node, plan vLLM as the GPU node would run it (installed there), not as this box can.
        plan = make_launch_plan(config, paths.root, gpus=config.launch.gpus, simulate=simulate,
                                vllm_available=True if simulate else None)
        plan.write()
        render_plan(plan, console)
        return 0

    check_run_dir(paths, options)
    console.print(f"[bold]mutualrl train[/] pool [cyan]{config.pool.name}[/] ({len(config.pool.policies)} policies), "
                  f"regime [cyan]{config.regime.name}[/], run folder {paths.root}", highlight=False)
    resume_step = None
    if options.resume:
        resume_step = prepare_resume(paths, config, console)
    else:
        prepare_run(paths, config, source, console)

    from mutualrl.launch.plan import make_launch_plan

    plan = make_launch_plan(config, paths.root, gpus=config.launch.gpus)
    plan.write()
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    processes = processes_from_plan(plan, paths, resume_step)
    write_run_json(paths, config, status="running")

    from mutualrl.launch.runner import PoolRunner
    from mutualrl.training.worker import exchange_root

    stall = config.launch.stall_timeout_s or config.see.barrier_timeout_s + 60.0
    runner = PoolRunner(processes, paths, exchange_root(config, paths), stall_timeout_s=stall,
                        grace_s=min(60.0, config.see.barrier_timeout_s + 10.0), console=console)
    outcome = runner.run()
    write_run_json(paths, config, status="done" if outcome.ok else "failed")
    from mutualrl.launch.summary import print_failure, print_summary, summarise

    if not outcome.ok:
        print_failure(outcome, paths, console)
        return 1
    summary = summarise(paths, config, outcome)
    atomic_write_json(paths.summary, summary)
    print_summary(summary, console)
    return 0


def check_run_dir(paths: RunPaths, options: TrainOptions) -> None:
    if options.resume:
        if not paths.config.exists():
            raise UsageError(f"--resume: {paths.root} holds no run to resume (no config.yaml)")
        return
    if paths.root.exists() and any(paths.root.iterdir()):
        if options.overwrite:
            shutil.rmtree(paths.root)
        else:
            raise UsageError(f"run folder {paths.root} already exists: use --resume to continue it, --overwrite to "
                             "start it again, or --output-dir for a new one")


def prepare_run(paths: RunPaths, config: RunConfig, source: str, console: Console) -> None:
    """Builtin models, the joint prompt filter, the resolved config -- before anything is launched."""
    from mutualrl.pools.builtin import ensure_builtin_models
    from mutualrl.pools.loading import BUILTIN_PREFIX, load_tokenizer_for
    from mutualrl.tasks.registry import get_task
    from mutualrl.training.data import EVAL_FILE, TRAIN_FILE, joint_length_filter, uses_chat_template, write_examples

    paths.root.mkdir(parents=True, exist_ok=True)
    tokenizers = {}
    builtin = [p.model[len(BUILTIN_PREFIX):] for p in config.pool.policies if p.model.startswith(BUILTIN_PREFIX)]
    if builtin:  # built or fetched once, here, with progress (tiny models warm-start side by side)
        ensure_builtin_models(builtin)
    for policy in config.pool.policies:
        tokenizer = load_tokenizer_for(policy.model, policy.tokenizer)
        tokenizers[policy.name] = (tokenizer, uses_chat_template(tokenizer, policy.chat_template))
    task = get_task(config.task.name)
    with console.status(f"loading task {config.task.name} ..."):
        train = task.load(config.task.train_split, config.task.source, config.task.train_limit)
        eval_limit = config.validation.limit if config.validation.limit is not None else config.task.eval_limit
        evals = task.load(config.task.eval_split, config.task.source, eval_limit)
    train_kept, report = joint_length_filter(train, tokenizers, config.task.max_prompt_tokens)
    eval_kept, eval_report = joint_length_filter(evals, tokenizers, config.task.max_prompt_tokens)
    if not train_kept:
        raise UsageError(f"no training prompt of task {config.task.name!r} fits task.max_prompt_tokens="
                         f"{config.task.max_prompt_tokens} for every policy")
    write_examples(paths.data / TRAIN_FILE, train_kept)
    write_examples(paths.data / EVAL_FILE, eval_kept)
    dropped = report.dropped + eval_report.dropped
    console.print(f"prompts: {report.kept} train, {eval_report.kept} held-out; {dropped} dropped for all policies "
                  f"as longer than {config.task.max_prompt_tokens} tokens for some policy "
                  f"({', '.join(f'{k}: {v}' for k, v in report.dropped_by_policy.items())})", highlight=False)
    atomic_write_text(paths.config, f"# resolved from {source}\n" + yaml.safe_dump(to_plain(config), sort_keys=False))


def write_run_json(paths: RunPaths, config: RunConfig, status: str) -> None:
    previous = read_json(paths.run_json) if paths.run_json.exists() else {}
    atomic_write_json(paths.run_json, {
        "pool": config.pool.name, "regime": config.regime.name, "task": config.task.name,
        "policies": [{"name": p.name, "model": p.model, "tokenizer": p.tokenizer} for p in config.pool.policies],
        "started": previous.get("started") or time.strftime("%Y-%m-%dT%H:%M:%S"),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S") if status != "running" else None,
        "status": status, "argv": sys.argv,
    })


def processes_from_plan(plan: Any, paths: RunPaths, resume_step: int | None) -> list[Any]:
    from mutualrl.launch.runner import PolicyProcess

    processes = []
    for spec in plan.specs:
        argv = list(spec.argv)
        if resume_step is not None:
            argv += ["--resume-from", str(paths.policy_dir(spec.policy) / f"checkpoint-{resume_step}")]
        processes.append(PolicyProcess(name=spec.policy, argv=argv, env=dict(spec.env), log_path=Path(spec.log_path),
                                       cwd=Path(spec.cwd) if spec.cwd else None))
    return processes


CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_steps(policy_dir: Path) -> set[int]:
    if not policy_dir.exists():
        return set()
    steps = set()
    for child in policy_dir.iterdir():
        match = CHECKPOINT_RE.match(child.name)
        if match and (child / "trainer_state.json").exists():
            steps.add(int(match.group(1)))
    return steps


def prepare_resume(paths: RunPaths, config: RunConfig, console: Console) -> int:
    """Pick the last checkpoint step every policy has, and roll the run folder back to it.

    Policies save at the same steps, but one may have died between two saves: resuming all
    of them from the latest COMMON step keeps them in lock-step. SEE records and metrics
    lines after that step are removed (they will be produced again), so the exchange stays
    consistent with the models.
    """
    common: set[int] | None = None
    for policy in config.pool.policies:
        steps = checkpoint_steps(paths.policy_dir(policy.name))
        common = steps if common is None else common & steps
    if not common:
        raise UsageError(f"--resume: no checkpoint common to every policy under {paths.root / 'policies'} "
                         f"(checkpoints are saved every grpo.save_steps={config.grpo.get('save_steps', 500)} steps)")
    step = max(common)
    from mutualrl.training.worker import exchange_root

    removed = rollback_exchange(exchange_root(config, paths), step)
    trimmed = rollback_metrics(paths, [p.name for p in config.pool.policies], step)
    console.print(f"resuming every policy from checkpoint-{step} (removed {removed} SEE step folders and "
                  f"{trimmed} metric lines after it)", highlight=False)
    for policy in config.pool.policies:  # stale status from the killed run
        paths.status(policy.name).unlink(missing_ok=True)
    failed = exchange_root(config, paths) / "_failed"
    if failed.exists():
        shutil.rmtree(failed)
    return step


def rollback_exchange(root: Path, step: int) -> int:
    removed = 0
    if not root.exists():
        return 0
    for child in root.iterdir():
        match = re.match(r"^step-(\d+)$", child.name)
        if match and int(match.group(1)) >= step:
            shutil.rmtree(child)
            removed += 1
    return removed


def rollback_metrics(paths: RunPaths, policies: list[str], step: int) -> int:
    """Drop metric lines of steps after ``step`` (per-policy files, the merged file, eval results)."""
    trimmed = 0
    files = [paths.policy_metrics(p) for p in policies] + [paths.metrics]
    for path in files:
        if not path.exists():
            continue
        keep = []
        for line in path.read_text().splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                trimmed += 1
                continue
            if int(obj.get("step", 0)) > step:
                trimmed += 1
                continue
            keep.append(line)
        atomic_write_text(path, "".join(f"{line}\n" for line in keep))
    for policy in policies:
        marker = paths.root / "metrics" / f".{policy}.merged"
        marker.unlink(missing_ok=True)
        # the merged file was rewritten above: mark every kept per-policy line as merged
        per_policy = paths.policy_metrics(policy)
        if per_policy.exists():
            marker.write_text(str(per_policy.stat().st_size))
        for result in (paths.root / "eval" / policy).glob("step-*.json"):
            if int(result.stem.split("-")[1]) > step:
                result.unlink()
    return trimmed

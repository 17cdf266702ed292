"""``mutualrl train`` end to end: resolve the recipe, prepare, plan (MWRA), launch, watch, summarise."""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from mutualrl.atomic_io import write_json_atomic, write_text_atomic
from mutualrl.config.loader import load_run_config
from mutualrl.config.schema import RunConfig
from mutualrl.config.typed import to_plain
from mutualrl.errors import StorageError, UsageError, storage_errors
from mutualrl.config.cadence import max_optimizer_steps
from mutualrl.launch.run_lock import (
    RunLock,
    check_no_escaping_symlinks,
    clear_run_folder,
    is_coordination_entry,
    is_run_folder,
    mark_run_folder,
    require_run_folder,
)
from mutualrl.launch.run_record import mark_failed, mark_interrupted, write_run_json
from mutualrl.training.paths import RunPaths, read_json


@dataclass
class TrainOptions:
    pool: str | None = None  # None: the default pool, or on --resume the run's own recipe
    regime: str | None = None
    prp_denominator: str | None = None
    output_dir: Path | None = None
    max_steps: int | None = None
    seed: int | None = None
    overrides: list[str] = field(default_factory=list)  # --set KEY=VALUE, as given
    force: bool = False  # --force: launch.force
    gpus: int | None = None
    device_map: str | None = None
    nodes: int | None = None  # several machines: launch.nodes, launch.machine_rank, launch.main_address
    machine_rank: int | None = None
    main_address: str | None = None
    dry_run: bool = False
    resume: bool = False
    overwrite: bool = False
    baseline: str | None = None  # also train this regime on the same seed and settings, then compare
    save_plan: Path | None = None  # --dry-run: also write the plan's JSON to this file (nothing else is written)


DEFAULT_POOL = "tiny"


def as_yaml_value(value: Any) -> str:
    """``value`` as the text of a ``--set`` value (JSON is YAML). Not ASCII-escaped: YAML reads JSON's
    ``\\ud83d\\ude00`` surrogate pairs as two broken characters, so an emoji in ``-o`` broke the path."""
    return json.dumps(value, ensure_ascii=False)


def resolve_config(options: TrainOptions) -> tuple[RunConfig, str]:
    """Recipe + ``--set`` overrides + the dedicated CLI options (which win).

    ``--resume`` continues from the run folder's own resolved config (not the recipe's
    current content); only the options given now are applied on top of it.
    """
    settings: list[tuple[str, str]] = []  # (flag, KEY=VALUE): the dedicated options, named by flag in errors
    if options.force:
        settings.append(("--force", "launch.force=true"))
    if options.seed is not None:
        settings.append(("--seed", f"grpo.seed={options.seed}"))
    if options.prp_denominator is not None:
        settings.append(("--prp-denominator", f"regime.prp.denominator={options.prp_denominator}"))
    for key in ("gpus", "nodes", "machine_rank", "main_address"):
        if getattr(options, key) is not None:
            settings.append((f"--{key.replace('_', '-')}", f"launch.{key}={as_yaml_value(getattr(options, key))}"))
    if options.output_dir is not None:  # a literal path: braces are not {pool}/{regime} placeholders
        literal = str(options.output_dir).replace("{", "{{").replace("}", "}}")
        try:
            literal.encode("utf-8")
        except UnicodeEncodeError:  # bytes that are not UTF-8 (a name from another locale)
            raise UsageError(f"--output-dir {options.output_dir!r}: the name is not valid UTF-8 text; "
                             "rename it or choose another folder") from None
        settings.append(("--output-dir", f"output_dir={as_yaml_value(literal)}"))
    if options.device_map is not None:
        from mutualrl.launch.mwra import parse_device_map

        settings.append(("--device-map", f"launch.device_map={as_yaml_value(parse_device_map(options.device_map))}"))
    loaded = load_run_config(options.pool or DEFAULT_POOL, overrides=options.overrides, regime=options.regime,
                             max_steps=options.max_steps, option_settings=settings)
    stored = RunPaths(run_dir_for(loaded.config)).config
    if options.resume and stored.is_file():  # the run's own settings; the options above still apply
        recipe_pool = loaded.config.pool.name
        loaded = load_run_config(str(stored), overrides=options.overrides, regime=options.regime,
                                 max_steps=options.max_steps, option_settings=settings)
        if options.pool is not None and recipe_pool != loaded.config.pool.name:
            raise UsageError(f"--resume: {stored.parent} is a run of pool {loaded.config.pool.name!r}, not "
                             f"{recipe_pool!r}; drop --pool to continue it, or start a new run with --output-dir")
    check_task(loaded.config)
    return loaded.config, loaded.source


def check_task(config: RunConfig) -> None:
    """The task and its splits exist: a typo fails here, not in every worker after the launch."""
    from mutualrl.tasks.registry import get_task

    task = get_task(config.task.name)
    for field_name in ("train_split", "eval_split"):
        split = getattr(config.task, field_name)
        if task.splits and split not in task.splits:
            raise UsageError(f"task.{field_name}: task {config.task.name!r} has no split {split!r}; "
                             f"it has: {', '.join(task.splits)}")


def run_dir_for(config: RunConfig) -> Path:
    return Path(config.output_dir.format(pool=config.pool.name, regime=config.regime.name)).resolve()


def baseline_options(options: TrainOptions, run_dir: Path) -> TrainOptions:
    """The same run with ``options.baseline`` as its regime, in the sibling folder ``<run>-<baseline>``."""
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
    if base.resume and not base.output_dir.exists():  # stopped before the baseline began: start it
        base = replace(base, resume=False)
    code = train_one(base, console)
    if code != 0 or config.launch.machine_rank > 0:  # machine 0 of several compares the two runs
        return code
    from mutualrl.launch.summary import compare_summaries, print_comparison

    paths, base_paths = RunPaths(run_dir), RunPaths(base.output_dir.resolve())
    comparison = compare_summaries(read_json(paths.summary), read_json(base_paths.summary))
    write_json_atomic(paths.root / "comparison.json", comparison)
    print_comparison(comparison, console)
    return 0


def train_one(options: TrainOptions, console: Console) -> int:
    config, source = resolve_config(options)
    paths = RunPaths(run_dir_for(config))
    if options.dry_run:
        from mutualrl.launch.render import render_plan

        plan = plan_without_launch(config, paths.root)
        render_plan(plan, console)
        if options.save_plan is not None:
            write_json_atomic(options.save_plan, plan.to_json())
            console.print(f"plan written to {options.save_plan}", highlight=False)
        return 0
    if config.launch.machine_rank > 0:  # another machine of a multi-machine run: join machine 0's run
        from mutualrl.launch.join import join_run

        return join_run(config, paths, console)

    check_run_dir(paths, options)  # refuses before anything is written
    allowed = resume_changes(paths, config) if options.resume and paths.config.exists() else []
    with RunLock(paths.root).acquire("resume" if options.resume else "train into") as lock:
        if lock.warning:
            console.print(f"[yellow]warning:[/] {lock.warning}", highlight=False)
        mark_interrupted(paths)
        if options.overwrite and not options.resume and is_run_folder(paths.root):  # a new folder has only .lock
            clear_run_folder(paths.root)
        try:
            with storage_errors(paths.root):  # a full disk anywhere: one line naming the path, run.json says so
                return launch_locked(options, config, source, paths, console, lock, allowed)
        except StorageError as err:
            mark_failed(paths, str(err))
            raise


def plan_without_launch(config: RunConfig, run_dir: Path, gpu_memory_gib: float | None = None) -> Any:
    """Plan the launch without starting or writing anything: ``--dry-run`` (a dry run into a finished run
    must not overwrite its record; ``LaunchPlan.write`` is the real launch's job).

    ``launch.gpus`` set (``--gpus``) simulates a node of that size (nothing is detected);
    there vLLM is planned as the GPU node would run it (installed there), not as this box can.
    """
    from mutualrl.launch.plan import make_launch_plan

    simulate = config.launch.gpus is not None
    plan = make_launch_plan(config, run_dir, gpus=config.launch.gpus, simulate=simulate,
                            vllm_available=True if simulate else None, gpu_memory_gib=gpu_memory_gib)
    return plan


def dry_run(options: TrainOptions, gpu_memory_gib: float | None = None) -> Any:
    """The plan ``mutualrl train --dry-run`` makes for ``options`` (the same code path)."""
    config, _ = resolve_config(options)
    return plan_without_launch(config, run_dir_for(config), gpu_memory_gib)


def launch_locked(options: TrainOptions, config: RunConfig, source: str, paths: RunPaths, console: Console,
                  lock: RunLock, allowed: list[str] | None = None) -> int:
    """Prepare (or roll back), launch and watch the pool; ``lock`` is held and passed on to every worker.

    ``allowed``: on resume, the permitted setting changes :func:`resume_changes` found.
    """
    from mutualrl.launch.resume import clear_training_outputs
    from mutualrl.training.worker import exchange_root

    resume_step = None
    if options.resume and paths.config.exists():
        config, resume_step = prepare_resume(paths, config, allowed or [], console)
        if resume_step is None:  # nothing to resume from yet: the same run from step 0
            clear_training_outputs(paths, exchange_root(config, paths))
            prepare_run(paths, config, read_source(paths) or source, console)
    else:  # a new run, or one stopped before its config was written
        prepare_run(paths, config, source, console)
    console.print(f"[bold]mutualrl train[/] pool [cyan]{config.pool.name}[/] ({len(config.pool.policies)} policies), "
                  f"regime [cyan]{config.regime.name}[/], run folder {paths.root}", highlight=False)

    from mutualrl.launch.plan import make_launch_plan

    plan = make_launch_plan(config, paths.root, gpus=config.launch.gpus)
    plan.write()
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    from mutualrl.launch.nodes import RemoteWatch, machines_of, open_session, reporting

    remote = None
    if config.launch.nodes > 1:  # the other machines join now (launch/nodes.py)
        nodes = config.launch.nodes
        session = open_session(paths.root, nodes, config.launch.main_address, resume_step,
                               config.launch.join_timeout_s, say=lambda text: console.print(text, highlight=False))
        remote = RemoteWatch(paths.root, exchange_root(config, paths), session, 0, machines_of(plan),
                             wait_for=range(1, nodes), peer_timeout_s=config.see.peer_timeout_s)
    with reporting(remote):  # several machines: a launcher error stops the others' workers at once
        processes = processes_from_plan(plan, paths, resume_step)
        write_run_json(paths, config, status="running")
        outcome = run_pool(config, paths, processes, lock, console, remote)
    status = "done" if outcome.ok else ("interrupted" if outcome.reason == "interrupted" else "failed")
    write_run_json(paths, config, status=status, reason=None if outcome.ok else outcome.reason)
    from mutualrl.launch.summary import print_failure, print_summary, summarise

    if not outcome.ok:
        print_failure(outcome, paths, console)
        return 130 if status == "interrupted" else 1
    summary = summarise(paths, config, outcome)
    write_json_atomic(paths.summary, summary)
    print_summary(summary, console)
    return 0


def run_pool(config: RunConfig, paths: RunPaths, processes: list[Any], lock: RunLock, console: Console,
             remote: Any = None) -> Any:
    """Start and watch this machine's workers until they end (machine 0 of several: until every machine ended)."""
    from mutualrl.launch.resume import restart_command
    from mutualrl.launch.runner import PoolRunner
    from mutualrl.training.worker import exchange_root

    stall = config.launch.stall_timeout_s or config.see.barrier_timeout_s + 60.0
    runner = PoolRunner(processes, paths, exchange_root(config, paths), stall_timeout_s=stall,
                        grace_s=min(60.0, config.see.barrier_timeout_s + 10.0), console=console,
                        inherit_fds=(lock.fd,) if lock.fd is not None else (),
                        max_steps=max_optimizer_steps(config), peer_timeout_s=config.see.peer_timeout_s,
                        remote=remote, merge_metrics=config.launch.machine_rank == 0,
                        on_peer_failure=config.see.on_peer_failure, max_restarts=config.see.max_restarts,
                        restart_argv=lambda policy: restart_command(processes, paths, policy))
    with stop_on_termination_signals():
        outcome = runner.run()
    if remote is not None and not outcome.ok:
        remote.report(False, outcome.reason, outcome.failed_policy, outcome.returncodes)
    return outcome


@contextlib.contextmanager
def stop_on_termination_signals() -> Iterator[None]:
    """SIGTERM / SIGHUP to the launcher stop the pool like Ctrl-C: workers stopped, run left resumable."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def check_run_dir(paths: RunPaths, options: TrainOptions) -> None:
    """Refuse, before writing anything, a folder this launch must not use (the lock then checks liveness)."""
    root = paths.root
    if options.resume:
        if not paths.config.exists() and not is_run_folder(root):
            raise UsageError(f"--resume: {root} holds no run to resume (no config.yaml)")
        check_no_escaping_symlinks(root)
        return
    content = [c for c in root.iterdir() if not is_coordination_entry(c.name)] if root.is_dir() else []
    if not content:
        return
    if not options.overwrite:
        raise UsageError(f"run folder {root} already exists: use --resume to continue it, --overwrite to "
                         "start it again, or --output-dir for a new one")
    require_run_folder(root)


SOURCE_HEADER = "# resolved from "


def write_resolved_config(paths: RunPaths, config: RunConfig, source: str) -> None:
    """``RUN/config.yaml``: the resolved config, headed by the recipe it came from (what workers and resume read)."""
    write_text_atomic(paths.config, f"{SOURCE_HEADER}{source}\n" + yaml.safe_dump(to_plain(config), sort_keys=False))


def read_source(paths: RunPaths) -> str | None:
    """The recipe a run was resolved from (first line of its config.yaml)."""
    try:
        first = paths.config.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    return first[len(SOURCE_HEADER):] if first.startswith(SOURCE_HEADER) else None


def prepare_run(paths: RunPaths, config: RunConfig, source: str, console: Console) -> None:
    """Builtin models, the joint prompt filter, the resolved config -- before anything is launched."""
    from mutualrl.pools.builtin import ensure_builtin_models
    from mutualrl.pools.loading import BUILTIN_PREFIX, load_tokenizer_for
    from mutualrl.tasks.registry import get_task
    from mutualrl.training.data import EVAL_FILE, TRAIN_FILE, joint_length_filter, uses_chat_template, write_examples

    mark_run_folder(paths.root)
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
    write_resolved_config(paths, config, source)


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


def resume_changes(paths: RunPaths, config: RunConfig) -> list[str]:
    """The allowed differences between the stored config and ``config``; refuses any other one."""
    from mutualrl.launch.resume import config_changes
    from mutualrl.training.worker import load_resolved_config

    refused, allowed = config_changes(to_plain(load_resolved_config(paths)), to_plain(config))
    if refused:
        raise UsageError(f"--resume: {paths.root} was started with other settings; these may not change on resume "
                         f"(start a new run with --output-dir instead): {'; '.join(refused)}")
    return allowed


def prepare_resume(paths: RunPaths, config: RunConfig, allowed: list[str],
                   console: Console) -> tuple[RunConfig, int | None]:
    """Store the allowed setting changes and roll the folder back to the restart step.

    Returns the config to run (the stored one with the ``allowed`` changes) and the last
    checkpoint step common to every policy, or None when there is none yet (start from 0).
    """
    from mutualrl.launch.resume import common_checkpoint, rollback_exchange, rollback_metrics
    from mutualrl.training.worker import exchange_root

    if allowed:
        console.print(f"resume: changed {'; '.join(allowed)}", highlight=False)
        write_resolved_config(paths, config, read_source(paths) or "resume")
    policies = [p.name for p in config.pool.policies]
    damaged: list[str] = []
    step = common_checkpoint(paths, policies, max_optimizer_steps(config), damaged)
    for problem in damaged:
        console.print(f"[yellow]warning:[/] skipping a damaged checkpoint: {problem}", highlight=False,
                      soft_wrap=True)  # one line, whatever the path's length (a log is read with grep)
    if step is None:
        console.print("resume: no checkpoint common to every policy yet: starting again from step 0", highlight=False)
        return config, None
    removed = rollback_exchange(exchange_root(config, paths), step)
    dropped = rollback_metrics(paths, policies, step)
    console.print(f"resuming every policy from checkpoint-{step} (removed {removed} SEE step folders and "
                  f"{dropped} metric rows after it; they are trained again)", highlight=False)
    for policy in policies:  # stale status from the stopped run
        paths.status(policy).unlink(missing_ok=True)
    return config, step

"""``mutualrl train`` end to end: resolve the recipe, prepare, plan (MWRA), launch, watch, summarise."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from mutualrl.atomic_io import write_json_atomic
from mutualrl.config.field_table import flag_fields
from mutualrl.config.loader import LoadedRecipe, OptionSetting, load_run_config, override_changes, parse_override
from mutualrl.config.plugins import open_run_folder
from mutualrl.config.recorded_code import accept_code, overrides_modules
from mutualrl.config.schema import RunConfig
from mutualrl.errors import StorageError, UsageError
from mutualrl.launch.rundir.inputs import check_resume_inputs, user_modules
from mutualrl.launch.rundir.lock import RunLock, clear_run_folder, is_run_folder
from mutualrl.launch.rundir.prepare import (
    check_run_dir,
    discard_unstarted,
    never_started,
    prepare_launch,
    prepared_train_prompts,
    resume_changes,
    without_config,
)
from mutualrl.launch.rundir.export_settings import given_now, refuse_stored_outbound
from mutualrl.launch.rundir.record import (
    finished_summary,
    mark_ended,
    mark_interrupted,
    mark_run_failed,
    write_run_json,
)
from mutualrl.launch.rundir.resume import ConfigChange, changes_training
from mutualrl.launch.supervise.machine_workers import run_machine_workers
from mutualrl.launch.supervise.signals import raise_if_interrupted, stop_signals
from mutualrl.pools.loading import refuse_stored_remote_code, sets_remote_code
from mutualrl.run_folder import RunPaths, read_json
from mutualrl.write_failures import storage_errors


@dataclass
class TrainOptions:
    pool: str | None = None  # None: the default pool, or on --resume the run's own recipe
    regime: str | None = None
    regime_overrides: list[tuple[str, str, str]] = field(default_factory=list)  # (--<regime>-<field>, key, value)
    output_dir: Path | None = None
    max_steps: int | None = None
    seed: int | None = None
    overrides: list[str] = field(default_factory=list)  # --set KEY=VALUE, as given
    # force ... main_address: named as their option, each setting the field that declares it (field_table.flag_fields)
    force: bool = False
    gpus: int | None = None
    gpu_memory: float | None = None
    ram: float | None = None
    device_map: str | None = None
    nodes: int | None = None
    machine_rank: int | None = None
    main_address: str | None = None
    dry_run: bool = False
    preflight: bool = False  # start every worker up to its first GPU touch, report, delete (launch/preflight.py)
    resume: bool = False
    overwrite: bool = False
    baseline: str | None = None  # also train this regime on the same seed and settings, then compare
    save_plan: Path | None = None  # --dry-run: also write the plan's JSON to this file (nothing else is written)
    allow_code: list[str] = field(default_factory=list)  # --allow-code: modules a run folder's config may name
    check_rows: int | None = None  # --dry-run's go/no-go sample (None: 32 where the rows are local, else none)
    check_save: Path | None = None  # --check-save: the go/no-go's scores as an eval file


DEFAULT_POOL = "tiny"


def option_settings(options: TrainOptions) -> list[OptionSetting]:
    """The dedicated options as typed recipe settings (they win over ``--set``; errors name the flag)."""
    settings = [OptionSetting(flag, key, value) for flag, key, value in options.regime_overrides]
    for flag, declared in flag_fields().items():  # --gpus, --nodes, --force...: each field declares its option
        value = getattr(options, flag.removeprefix("--").replace("-", "_"))
        if value is not None and value is not False:  # not given: the recipe's value stands
            settings.append(OptionSetting(flag, declared.key, value))
    if options.seed is not None:
        settings.append(OptionSetting("--seed", "grpo.seed", options.seed))
    if options.output_dir is not None:  # a literal path: braces are not {pool}/{regime} placeholders
        literal = str(options.output_dir).replace("{", "{{").replace("}", "}}")
        try:
            literal.encode("utf-8")
        except UnicodeEncodeError:  # bytes that are not UTF-8 (a name from another locale)
            raise UsageError(f"--output-dir {options.output_dir!r}: the name is not valid UTF-8 text; "
                             "rename it or choose another folder") from None
        settings.append(OptionSetting("--output-dir", "output_dir", literal))
    if options.device_map is not None:
        from mutualrl.launch.plan.mwra import parse_device_map

        settings.append(OptionSetting("--device-map", "launch.device_map", parse_device_map(options.device_map)))
    return settings


def resolve_config(options: TrainOptions) -> tuple[RunConfig, str]:
    """Recipe + ``--set`` overrides + the dedicated CLI options (which win).

    ``--resume`` continues from the run folder's own resolved config (not the recipe's
    current content); only the options given now are applied on top of it. The recipe is
    read only when it is needed: to find the run folder (no ``-o``) or to check ``--pool``.
    """
    settings = option_settings(options)
    accept_code(options.allow_code)
    # the command's own --set names its code too (so a run folder's config naming the same module is read: reuse)
    accept_code(overrides_modules(parse_override(text) for text in options.overrides))

    def load(source: str) -> LoadedRecipe:
        return load_run_config(source, overrides=options.overrides, regime=options.regime,
                               max_steps=options.max_steps, option_settings=settings)

    given = RunPaths(options.output_dir.resolve()).config if options.output_dir is not None else None
    if options.resume and given is not None and (problem := without_config(RunPaths(given.parent))) is not None:
        raise UsageError(f"--resume: {problem}")
    if options.resume and given is not None:
        open_run_folder(given.parent)  # the run to resume is data: nothing it names is imported from inside it
        check_resume_inputs(RunPaths(given.parent))  # its user code and data copy as recorded, before any import
    if options.resume and options.pool is None and given is not None and given.is_file():
        loaded = load(str(given))  # the folder is known: its own settings, the recipe is not read
        refuse_stored_settings(loaded.config, options, settings, given.parent)
        return checked(loaded)
    if options.resume and options.pool is None and given is not None and given.parent.is_dir():
        raise UsageError(f"--resume: {given.parent} holds no run to resume (no config.yaml: its start failed "
                         "before training began, or it is no run folder); start it with the command you meant, "
                         "without --resume (the folder is reused)")
    loaded = load(options.pool or DEFAULT_POOL)
    stored = RunPaths(run_dir_for(loaded.config)).config
    if options.pool is not None:  # the recipe this command names names its code
        accept_code(user_modules(loaded.config))
    if options.resume and stored.is_file():  # the run's own settings; the options above still apply
        open_run_folder(stored.parent)
        check_resume_inputs(RunPaths(stored.parent))
        recipe_pool = loaded.config.pool.name
        loaded = load(str(stored))
        refuse_stored_settings(loaded.config, options, settings, stored.parent)
        if options.pool is not None and recipe_pool != loaded.config.pool.name:
            raise UsageError(f"--resume: {stored.parent} is a run of pool {loaded.config.pool.name!r}, not "
                             f"{recipe_pool!r}; drop --pool to continue it, or start a new run with --output-dir")
    return checked(loaded)


def refuse_stored_settings(config: RunConfig, options: TrainOptions, settings: list[OptionSetting],
                           run_folder: Path) -> None:
    """A run folder's settings that only the command running now may give: code shipped with a model, and anything
    that sends the run's weights, completions or metrics elsewhere."""
    refuse_stored_remote_code(config, sets_remote_code(options.overrides), run_folder)
    given = given_now(config, options.overrides, [setting.key for setting in settings])
    refuse_stored_outbound(config, given, run_folder)


def checked(loaded: LoadedRecipe) -> tuple[RunConfig, str]:
    """The loaded config and its source, once its task and splits are known to exist."""
    from mutualrl.launch.plan.checks import check_model_context, check_ports
    from mutualrl.pools.loading import check_init_adapter

    check_task(loaded.config)
    for policy in loaded.config.pool.policies:  # a missing warm start: one line naming how to build it
        check_init_adapter(policy.name, policy.init_adapter, policy.init_adapter_build)
    check_model_context(loaded.config)
    check_ports(loaded.config)
    return loaded.config, loaded.source


def check_task(config: RunConfig) -> None:
    """The task, its splits, its source and its reward functions exist: a typo or an import error fails here
    (the dry run too), not in every worker after the launch."""
    from mutualrl.tasks.registry import task_from_config
    from mutualrl.tasks.reward_funcs import check_reward_spec, check_task_columns, reward_spec

    task = task_from_config(config.task)
    for field_name in ("train_split", "eval_split"):
        split = getattr(config.task, field_name)
        if task.splits and split not in task.splits:
            raise UsageError(f"task.{field_name}: task {config.task.name!r} has no split {split!r}; "
                             f"it has: {', '.join(task.splits)}")
    task.check_source(config.task.source)
    for policy in config.pool.policies:  # a policy's own grpo.reward_weights must fit the functions too
        check_reward_spec(reward_spec(config.task, {**config.grpo, **policy.grpo}))
    check_task_columns(task, config.task, config.grpo)  # every parameter of every function is a column


def run_dir_for(config: RunConfig) -> Path:
    return Path(config.output_dir.format(pool=config.pool.name, regime=config.regime.name)).resolve()


def baseline_options(options: TrainOptions, run_dir: Path) -> TrainOptions:
    """The same run with ``options.baseline`` as its regime, in the sibling folder ``<run>-<baseline>``."""
    return replace(options, regime=options.baseline, regime_overrides=[], baseline=None,
                   output_dir=run_dir.with_name(f"{run_dir.name}-{options.baseline}"))


def run_train(options: TrainOptions, console: Console | None = None) -> int:
    """Train the pool; with ``options.baseline`` also train the baseline regime and print both side by side."""
    from mutualrl.host.terminal import best_effort_console

    # one Ctrl-C stops both runs of a pair, even if it came between them; a full or closed console stops neither
    with stop_signals(), best_effort_console():
        return _run_train(options, console or Console())


def _run_train(options: TrainOptions, console: Console) -> int:
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
    fresh = not options.resume and not options.overwrite
    run_done = fresh and reuse_finished(RunPaths(run_dir), config, console)
    base_done, code = False, 0
    if fresh and base.output_dir.exists() and any(base.output_dir.iterdir()):
        base_done = reuse_finished(RunPaths(base.output_dir.resolve()), resolve_config(base)[0], console)
        if not base_done:
            raise UsageError(f"baseline run folder {base.output_dir} already exists: use --resume to continue both "
                             "runs, --overwrite to start both again, or --output-dir for a new pair")
    if not run_done:
        code = train_one(options, console)
        if code != 0:
            return code
    if not base_done:
        code = train_baseline(base, options.baseline, console)
    if code != 0 or config.launch.machine_rank > 0:  # machine 0 of several compares the two runs
        return code
    from mutualrl.launch.rundir.summary import compare_summaries, print_comparison

    paths, base_paths = RunPaths(run_dir), RunPaths(base.output_dir.resolve())
    comparison = compare_summaries(read_json(paths.summary), read_json(base_paths.summary))
    write_json_atomic(paths.comparison, comparison)
    print_comparison(comparison, console)
    return 0


def train_baseline(base: TrainOptions, regime: str, console: Console) -> int:
    """The baseline run of ``--baseline``: started, or continued when ``base.resume`` and it began."""
    console.print(f"[bold]baseline:[/] the same pool, seed and settings with regime {regime}", highlight=False)
    if base.resume and not base.output_dir.exists():  # stopped before the baseline began: start it
        base = replace(base, resume=False)
    return train_one(base, console)


#: What ``--baseline`` says when the folder it would reuse holds a run with other settings.
BASELINE_REUSE_HINT = ("--baseline reuses a run only when it finished with the same settings, code and data: use "
                       "--output-dir for a new pair, or --overwrite to train both again")


def reuse_finished(paths: RunPaths, config: RunConfig, console: Console, hint: str = BASELINE_REUSE_HINT,
                   again: str = "--overwrite trains it again") -> bool:
    """``--baseline`` and ``mutualrl sweep``: a run that finished in ``paths`` with ``config``'s settings is used as it
    is, and the console says so (and ``again``: how to train it again); a run there with settings ``--resume``
    refuses is refused, naming them, then ``hint``. False: ``paths`` holds no run to reuse (an empty folder, a run
    still to finish, or one whose settings changed only where a resume may change them)."""
    from mutualrl.launch.rundir.inputs import code_changes
    from mutualrl.launch.rundir.prepare import data_copy_changes
    from mutualrl.launch.rundir.record import reusable_summary, settings_differences

    # the settings name a reward module and a data file, not their content: an edited one is another run
    differences = code_changes(paths) if paths.config.is_file() else []
    if not differences and reusable_summary(paths, config) is not None:
        differences = data_copy_changes(paths, config, console)
        if not differences:
            console.print(f"{paths.root}: finished with these settings; using it as it is, not training it again "
                          f"({again})", highlight=False, soft_wrap=True)
            return True
    # a run to go on takes the settings --resume accepts (docs/settings.md: "may change on resume")
    differences = differences or settings_differences(paths, config, may_change=False)
    if differences:
        shown = "; ".join(differences[:4]) + (f"; ... {len(differences) - 4} more" if len(differences) > 4 else "")
        raise UsageError(f"{paths.root} holds a run with other settings or inputs ({shown}); {hint}")
    return False


def train_one(options: TrainOptions, console: Console) -> int:
    """``mutualrl train`` for one run; a stop signal at any moment, even one Python drops, stops it (:mod:`.supervise.signals`)."""
    with stop_signals():
        return _train_one(options, console)


def _train_one(options: TrainOptions, console: Console) -> int:
    config, source = resolve_config(options)
    check_versions(config, options.dry_run, console)
    if options.dry_run or options.preflight:  # what the launch refuses, the dry runs refuse (naming the policy)
        from mutualrl.launch.rundir.prepare import check_chat_templates

        check_chat_templates(config)
    paths = RunPaths(run_dir_for(config))
    if options.preflight:
        from mutualrl.launch.preflight import run_preflight

        check_run_dir(paths, options.resume, options.overwrite)  # the -o the run would refuse, refused now
        return run_preflight(config, source, paths.root, console)
    if options.dry_run:
        from mutualrl.launch.plan.render import render_plan
        from mutualrl.tasks.reward_funcs import task_summary

        rows_checked, train = check_local_rows(config, console)  # a bad row fails here, before the plan is shown
        plan = plan_without_launch(config, paths.root, saved=resume_ranks(paths, config, options.resume),
                                   train_prompts=None if train is None else len(train))
        render_plan(plan, console)
        if plan.placement.gpus:  # the planned step time is a GPU step's
            from mutualrl.launch.supervise.stop_grace import sbatch_signal_line

            console.print(sbatch_signal_line(plan), highlight=False, soft_wrap=True)
        console.print(task_summary(config.task, config.grpo), highlight=False, soft_wrap=True)
        if rows_checked:
            console.print(rows_checked, highlight=False, soft_wrap=True)
        from mutualrl.launch.pool_check import check_rows_for, run_pool_check

        local = train is not None and not options.resume  # a resumed run was judged as it started
        run_pool_check(config, check_rows_for(options.check_rows, local), console, train, options.check_save,
                       asked=options.check_rows is not None)
        for change in override_changes(options.pool or DEFAULT_POOL, options.overrides) if options.overrides else ():
            console.print(f"--set {change}", highlight=False, soft_wrap=True)
        if options.save_plan is not None:
            write_json_atomic(options.save_plan, plan.to_json())
            console.print(f"plan written to {options.save_plan}", highlight=False)
        return 0
    if config.launch.machine_rank > 0:  # another machine of a multi-machine run: join machine 0's run
        from mutualrl.launch.secondary_machine import join_run

        return join_run(config, paths, console)

    check_run_dir(paths, options.resume, options.overwrite)  # refuses before anything is written
    allowed = resume_changes(paths, config) if options.resume and paths.config.exists() else []
    if options.resume and config.launch.machine_rank == 0:  # other machines join the plan machine 0 checked
        from mutualrl.launch.plan.launch_plan import check_resume_placement

        check_resume_placement(config, resume_ranks(paths, config, True))
    raise_if_interrupted()  # stopped while loading: leave the run as it was
    fresh = not paths.root.exists() and config.launch.nodes == 1  # several machines share the folder
    try:
        return _train_locked(options, config, source, paths, allowed, console)
    except BaseException:
        if fresh:  # refused before any worker started (prepare, plan): no half-made folder blocks the next try
            discard_unstarted(paths)
        raise


def check_local_rows(config: RunConfig, console: Console) -> tuple[str | None, list[Any] | None]:
    """``--dry-run``: the rows of a local ``task.source`` read and checked as the launch reads them before any
    worker starts (:func:`~mutualrl.launch.rundir.prepare.task_examples`), so a bad row is the same one-line error
    now; the line saying what was checked and the training rows, or None twice where the source is no local file or
    folder (a hub dataset, ``auto``: the launch reads and checks those rows; a dry run downloads nothing)."""
    from rich.markup import escape

    from mutualrl.launch.rundir.prepare import held_out_warning, task_examples
    from mutualrl.tasks.sources import existing_local_source

    source = config.task.source
    if existing_local_source(source) is None:
        return None, None

    with console.status(f"checking the rows of {source} ..."):
        train, evals = task_examples(config)
    repeats = held_out_warning(train, evals)  # said before training, as the launch says it
    if repeats:
        console.print(f"[yellow]warning:[/] {escape(repeats)}", highlight=False, soft_wrap=True)
    return (f"rows of {source}: {len(train)} train, {len(evals)} held-out, each checked as the launch reads them",
            train)


def check_versions(config: RunConfig, dry_run: bool, console: Console) -> None:
    """TRL, and vLLM where a policy generates with it, as tested (versions.py), before anything is
    written; a dry run starts nothing, so it only warns."""
    from mutualrl.versions import check_tested_versions

    uses_vllm = any({**config.grpo, **policy.grpo}.get("use_vllm") for policy in config.pool.policies)
    try:
        warning = check_tested_versions(uses_vllm)
    except UsageError as err:
        if not dry_run:
            raise
        warning = f"{err} (a real run refuses)"
    if warning:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)


def _train_locked(options: TrainOptions, config: RunConfig, source: str, paths: RunPaths,
                  allowed: list[ConfigChange], console: Console) -> int:
    with RunLock(paths.root).acquire("resume" if options.resume else "train into") as lock:
        if lock.warning:
            console.print(f"[yellow]warning:[/] {lock.warning}", highlight=False)
        finished = (finished_summary(paths, config) if options.resume and config.launch.nodes == 1
                    and not changes_training(allowed) else None)
        if finished is not None:  # nothing to train: no workers (several machines: all relaunch)
            return report_finished(paths, finished, console)
        mark_interrupted(paths)
        if not options.resume and is_run_folder(paths.root) and (options.overwrite or never_started(paths)):
            clear_run_folder(paths.root)  # a new folder has only .lock; a failed start's leftovers go
        try:
            with storage_errors(paths.root):  # a full disk anywhere: one line naming the path, run.json says so
                return launch_locked(options, config, source, paths, console, lock, allowed)
        except StorageError as err:
            mark_run_failed(paths, str(err))
            raise
        except KeyboardInterrupt:
            mark_ended(paths, "interrupted", "interrupted")
            raise
        except BaseException as err:  # whatever stopped the launcher, run.json never stays "running"
            mark_ended(paths, "failed", f"launcher error: {type(err).__name__}: {str(err)[:500]}")
            raise


def report_finished(paths: RunPaths, summary: dict[str, Any], console: Console) -> int:
    """``--resume`` of a run that finished with these settings: say so and show its summary again."""
    from mutualrl.launch.rundir.summary import print_summary

    console.print(f"--resume: {paths.root} finished; nothing to resume (train it longer: --resume --max-steps N)",
                  highlight=False)
    print_summary(summary, console)
    return 0


def resume_ranks(paths: RunPaths, config: RunConfig, resume: bool) -> dict[str, tuple[int, str]] | None:
    """``--resume``: the ranks each policy's DeepSpeed checkpoint was saved by, for the plan to check (None: a new
    run, whatever the folder holds: ``--overwrite`` clears it)."""
    from mutualrl.launch.rundir.resume import saved_ranks

    return saved_ranks(paths, [p.name for p in config.pool.policies]) if resume else None


def plan_without_launch(config: RunConfig, run_dir: Path, gpu_memory_gib: float | None = None,
                        saved: dict[str, tuple[int, str]] | None = None, train_prompts: int | None = None) -> Any:
    """Plan the launch without starting or writing anything: ``--dry-run`` (a dry run into a finished run
    must not overwrite its record; ``LaunchPlan.write`` is the real launch's job).

    ``launch.gpus`` set (``--gpus``) simulates a node of that size (nothing is detected);
    there vLLM is planned as the GPU node would run it (installed there), not as this box can.
    ``saved``: ``--resume``'s checkpoints (:func:`resume_ranks`), refused on another rank count as the launch does.
    ``train_prompts``: the rows of a local ``task.source`` (None: the task's known train size, where it has one);
    fewer than one step draws are refused, before the joint length filter drops any.
    """
    from mutualrl.launch.plan.launch_plan import make_launch_plan
    from mutualrl.tasks.registry import known_train_prompts

    simulate = config.launch.gpus is not None
    local = train_prompts is not None
    train_prompts = train_prompts if local else known_train_prompts(config.task)
    where = (f"task.source {config.task.source}" if local else f"task {config.task.name}"
             + (f" (task.train_limit {config.task.train_limit})" if config.task.train_limit else ""))
    plan = make_launch_plan(config, run_dir, gpus=config.launch.gpus, simulate=simulate,
                            vllm_available=True if simulate else None, gpu_memory_gib=gpu_memory_gib, dry_run=True,
                            resume_ranks=saved, train_prompts=train_prompts, prompts_source=where)
    return plan


def launch_locked(options: TrainOptions, config: RunConfig, source: str, paths: RunPaths, console: Console,
                  lock: RunLock, allowed: list[ConfigChange] | None = None) -> int:
    """Prepare (or roll back), launch and watch the pool; ``lock`` is held and records every worker started.

    ``allowed``: on resume, the permitted setting changes :func:`resume_changes` found.
    """
    resumed = options.resume and paths.run_json.is_file()  # a run that launched before (its record says so)
    config, resume_step = prepare_launch(paths, config, source, options.resume, allowed or [], console)
    console.print(f"[bold]mutualrl train[/] pool [cyan]{config.pool.name}[/] ({len(config.pool.policies)} policies), "
                  f"regime [cyan]{config.regime.name}[/], run folder {paths.root}", highlight=False)

    from mutualrl.launch.plan.launch_plan import make_launch_plan
    from mutualrl.launch.ports import claim_run_ports

    config, ports = claim_run_ports(config)  # free here, and no other run on this machine takes them before ours ends
    saved = resume_ranks(paths, config, options.resume)
    with ports:
        plan = make_launch_plan(config, paths.root, gpus=config.launch.gpus, resume_ranks=saved,
                                train_prompts=prepared_train_prompts(paths),
                                prompts_source=f"{paths.data} (the prompts kept by the length filter)")
        return launch_claimed(config, paths, resume_step, lock, console, plan, resumed=resumed)


def launch_claimed(config: RunConfig, paths: RunPaths, resume_step: int | None, lock: RunLock, console: Console,
                   plan: Any, resumed: bool = False) -> int:
    """Write the plan, launch and watch the pool (its rendezvous ports held), report how it ended. ``resumed``:
    a ``--resume`` of a run that launched before; run.json's ``resumes`` records it, from ``resume_step`` (or 0)."""
    plan.write()
    from mutualrl.tasks.shipped_rewards import write_shipped

    write_shipped(config.task.reward_funcs, paths.shipped_rewards)  # the Python API's lambdas and closures
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    from mutualrl.launch.supervise.nodes import RemoteWatch, machines_of, open_session, reporting

    remote = None
    if config.launch.nodes > 1:  # the other machines join now (launch/supervise/nodes.py)
        nodes = config.launch.nodes
        session = open_session(paths.root, nodes, config.launch.main_address, resume_step,
                               config.launch.join_timeout_s, say=lambda text: console.print(text, highlight=False))
        remote = RemoteWatch(paths.root, paths.see_root(config.see.dir), session, 0, machines_of(plan),
                             wait_for=range(1, nodes), peer_timeout_s=config.see.peer_timeout_s)
    with reporting(remote):  # several machines: a launcher error stops the others' workers at once
        write_run_json(paths, config, status="running",
                       resumed_from=(resume_step or 0) if resumed else None)
        outcome = run_machine_workers(config, plan, paths, resume_step, lock, console, remote)
    status = "done" if outcome.ok else ("interrupted" if outcome.reason == "interrupted" else "failed")
    write_run_json(paths, config, status=status, reason=None if outcome.ok else outcome.reason)
    from mutualrl.launch.rundir.summary import print_failure, print_summary, summarise

    if not outcome.ok:
        print_failure(outcome, paths, console)
        return 130 if status == "interrupted" else 1
    summary = summarise(paths, config, outcome)
    write_json_atomic(paths.summary, summary)
    print_summary(summary, console)
    return 0

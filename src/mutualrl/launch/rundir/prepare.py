"""Preparing the run folder before a launch: refuse a folder this launch must not use, write the prompts and
the resolved config of a new run, or roll a resumed run back to its restart step."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from mutualrl.config.cadence import max_optimizer_steps
from mutualrl.config.resolved import load_resolved_config, read_source, write_resolved_config
from mutualrl.config.schema import RunConfig
from mutualrl.config.typed import to_plain
from mutualrl.errors import UsageError
from mutualrl.launch.rundir.inputs import record_inputs
from mutualrl.launch.rundir.lock import (
    check_no_escaping_symlinks,
    is_coordination_entry,
    is_run_folder,
    mark_run_folder,
    require_run_folder,
)
from mutualrl.launch.rundir.metrics_merge import rollback_metrics
from mutualrl.launch.rundir.resume import ConfigChange, clear_training_outputs, common_checkpoint, config_changes
from mutualrl.launch.rundir.see_owner import claim_exchange, refuse_live_owner
from mutualrl.run_folder import RunPaths
from mutualrl.ops.exchange_rollback import refuse_older_layout, rollback_exchange


def check_run_dir(paths: RunPaths, resume: bool, overwrite: bool) -> None:
    """Refuse, before writing anything, a folder this launch must not use (the lock then checks liveness)."""
    root = paths.root
    if resume:
        if not paths.config.exists() and not is_run_folder(root):
            raise UsageError(f"--resume: {root} holds no run to resume (no config.yaml)")
        check_no_escaping_symlinks(root)
        return
    content = [c for c in root.iterdir() if not is_coordination_entry(c.name)] if root.is_dir() else []
    if not content or never_started(paths):  # a failed start left only what it began: it is started again
        return
    a_run = is_run_folder(root) or paths.run_json.exists()  # a folder of something else: --output-dir, below
    if not overwrite and a_run and (problem := without_config(paths)) is not None:
        raise UsageError(f"run folder {problem}")
    if not overwrite:
        raise UsageError(f"run folder {root} already exists: use --resume to continue it, --overwrite to "
                         "start it again, or --output-dir for a new one")
    require_run_folder(root)


def discard_unstarted(paths: RunPaths) -> None:
    """Remove a run folder this launch created and refused before starting any worker (no ``run.json`` yet)."""
    import shutil

    if paths.root.is_dir() and not paths.run_json.exists():
        shutil.rmtree(paths.root, ignore_errors=True)


def never_started(paths: RunPaths) -> bool:
    """A run folder whose start failed before its config was written (bad data, a typo): it holds nothing of a
    run (prompts at most), so the corrected command starts it again instead of asking for ``--resume``."""
    return paths.marker.is_file() and not paths.config.exists() and not paths.run_json.exists()


def without_config(paths: RunPaths) -> str | None:
    """What is wrong with a run folder that holds files but no ``config.yaml`` (a copy cut short, a folder of
    something else), which ``train`` can neither start again nor resume, and what to do; None for a folder that
    has its config, holds nothing, or is a start that failed before writing it (started again as it is)."""
    root = paths.root
    if paths.config.exists() or not root.is_dir() or never_started(paths):
        return None
    content = sorted(c.name for c in root.iterdir() if not is_coordination_entry(c.name))
    if not content:
        return None
    shown = ", ".join(content[:3]) + (", ..." if len(content) > 3 else "")
    again = ", or start it again with --overwrite (which deletes it)" if is_run_folder(root) else ""
    return (f"{root} holds files ({shown}) but no config.yaml, so it can be neither resumed nor started again; "
            f"restore its config.yaml, or move the folder away{again}")


def prepare_launch(paths: RunPaths, config: RunConfig, source: str, resume: bool, allowed: list[ConfigChange],
                   console: Console) -> tuple[RunConfig, int | None]:
    """Prepare a new run, or roll a resumed one back: the config to run and the checkpoint step every policy
    resumes from (None: from step 0). ``allowed``: the setting changes :func:`resume_changes` permitted."""
    see_root = paths.see_root(config.see.dir)
    refuse_live_owner(see_root, paths)  # before anything of the exchange is rolled back or removed
    resume_step = None
    if not (resume and paths.config.exists()):  # a new run, or one stopped before its config was written
        prepare_run(paths, config, source, console)
    else:
        refuse_older_layout(see_root)  # before anything is rolled back or rewritten
        config, resume_step = prepare_resume(paths, config, allowed, console)
        if resume_step is None:  # nothing to resume from yet: the same run from step 0
            clear_training_outputs(paths, see_root)
            prepare_run(paths, config, read_source(paths) or source, console)
    if claim_exchange(see_root, paths):
        console.print(f"[yellow]warning:[/] {escape(str(see_root))} belonged to another run (stopped); it now "
                      "belongs to this one", highlight=False, soft_wrap=True)
    return config, resume_step


def prepare_run(paths: RunPaths, config: RunConfig, source: str, console: Console) -> None:
    """Builtin models, the joint prompt filter, the resolved config -- before anything is launched."""
    from mutualrl.training.data import EVAL_FILE, TRAIN_FILE, write_examples

    mark_run_folder(paths.root)
    train_kept, eval_kept, reports = kept_prompts(config, console)
    from mutualrl.tasks.reward_funcs import task_summary

    console.print(task_summary(config.task, config.grpo), highlight=False)
    warn_seen_prompts(config, train_kept, eval_kept, console)
    write_examples(paths.data / TRAIN_FILE, train_kept)
    write_examples(paths.data / EVAL_FILE, eval_kept)
    record_inputs(paths, config)  # what --resume and eval check the user's code and this data copy against
    report, eval_report = reports
    dropped = report.dropped + eval_report.dropped
    console.print(f"prompts: {report.kept} train, {eval_report.kept} held-out; {dropped} dropped for all policies "
                  f"as longer than {config.task.max_prompt_tokens} tokens for some policy "
                  f"({', '.join(f'{k}: {v}' for k, v in report.dropped_by_policy.items())})", highlight=False)
    write_resolved_config(paths, config, source)


def warn_seen_prompts(config: RunConfig, train: list[Any], held_out: list[Any], console: Console) -> None:
    """A user's dataset whose prompts the pool's models already saw (a built-in pool's warm start or held-out
    data): one warning line with the counts."""
    from mutualrl.pools.seen_prompts import overlap_warning

    if config.task.name != "dataset":
        return
    warning = overlap_warning([p.model for p in config.pool.policies], train, held_out)
    if warning:
        console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)


def kept_prompts(config: RunConfig, console: Console) -> tuple[list[Any], list[Any], tuple[Any, Any]]:
    """The training and held-out prompts a run of ``config`` keeps (every policy's tokens within
    ``task.max_prompt_tokens``) and the filter's two reports; the builtin models are built first."""
    from mutualrl.pools.builtin import ensure_builtin_models
    from mutualrl.pools.loading import BUILTIN_PREFIX, tokenizer_source
    from mutualrl.training.data import joint_length_filter
    from mutualrl.training.prompt_lengths import PromptLengths

    builtin = [p.model[len(BUILTIN_PREFIX):] for p in config.pool.policies if p.model.startswith(BUILTIN_PREFIX)]
    if builtin:  # built or fetched once, here, with progress (tiny models warm-start side by side)
        ensure_builtin_models(builtin)
    lengths = {policy.name: PromptLengths(tokenizer_source(policy.model, policy.tokenizer), policy.chat_template,
                                          config.task.max_prompt_tokens)
               for policy in config.pool.policies}  # remembered counts: most launches load no tokenizer
    for policy_lengths in lengths.values():
        policy_lengths.uses_chat()  # refuses a chat template the tokenizer lacks before any data is loaded
    with console.status(f"loading task {config.task.name} ..."):
        train, evals = task_examples(config)
    train_kept, report = joint_length_filter(train, lengths, config.task.max_prompt_tokens)
    eval_kept, eval_report = joint_length_filter(evals, lengths, config.task.max_prompt_tokens)
    for policy_lengths in lengths.values():
        policy_lengths.save()
    if not train_kept:
        raise no_prompt_fits(config, train, lengths)
    return train_kept, eval_kept, (report, eval_report)


def task_examples(config: RunConfig) -> tuple[list[Any], list[Any]]:
    """The training and held-out examples a run of ``config`` reads, every row checked as the task loads it (a
    missing ``prompt``, a column changing type, a text over ``task.max_prompt_chars``: one line naming the file,
    the row and the column); the launch's and ``--dry-run``'s one reading of the rows."""
    from mutualrl.tasks.registry import task_from_config

    task = task_from_config(config.task)
    train = task.load(config.task.train_split, config.task.source, config.task.train_limit)
    eval_limit = config.validation.limit if config.validation.limit is not None else config.task.eval_limit
    evals = task.load(config.task.eval_split, config.task.source, eval_limit)
    return train, evals


def data_copy_changes(paths: RunPaths, config: RunConfig, console: Console) -> list[str]:
    """``--baseline``: each file of the run's data copy that ``config``'s data would now make otherwise (the source
    edited since the run), as one phrase; empty for a run from before ``inputs.json`` recorded its data."""
    import tempfile
    from pathlib import Path

    from mutualrl.config.recorded_code import file_hash
    from mutualrl.inputs_record_reader import recorded_inputs
    from mutualrl.training.data import EVAL_FILE, TRAIN_FILE, write_examples

    record = recorded_inputs(paths)
    if record is None:
        return []
    train_kept, eval_kept, _ = kept_prompts(config, console)
    with tempfile.TemporaryDirectory() as scratch:
        now = {}
        for name, examples in ((TRAIN_FILE, train_kept), (EVAL_FILE, eval_kept)):
            write_examples(Path(scratch) / name, examples)
            now[name] = file_hash(Path(scratch) / name)
    return [f"{config.task.source or config.task.name} now gives other {name} rows than {paths.data / name}"
            for name in sorted(now) if record["data"].get(name) != now[name]]


def no_prompt_fits(config: RunConfig, train: list[Any], lengths: dict[str, Any]) -> UsageError:
    """No training prompt fits ``task.max_prompt_tokens`` for every policy: the error names the setting and the
    values that would fit (the shortest prompt's, and every prompt's), and, on the tiny pool, the pools for text."""
    limit = config.task.max_prompt_tokens
    needed = sorted(max(length(example) for length in lengths.values()) for example in train)
    if not needed:
        return UsageError(f"task {config.task.name!r} has no training prompt (task.source, task.train_split)")
    hint = (" The tiny pool's models know only short arithmetic prompts: for your own text use --pool smol (or "
            "smol-qa, smol-arith) or your own models (README: your own data)." if config.pool.name == "tiny" else "")
    return UsageError(f"no training prompt of task {config.task.name!r} fits task.max_prompt_tokens={limit} for every "
                      f"policy: the shortest takes {needed[0]} tokens, the longest {needed[-1]}; set "
                      f"--set task.max_prompt_tokens={needed[-1]} to keep them all.{hint}")


def resume_changes(paths: RunPaths, config: RunConfig) -> list[ConfigChange]:
    """The allowed differences between the stored config and ``config``; refuses any other one."""

    stored = load_resolved_config(paths)
    refused, allowed = config_changes(to_plain(stored), to_plain(config))
    if refused:
        raise UsageError(f"--resume: {paths.root} was started with other settings; these may not change on resume "
                         f"(start a new run with --output-dir instead): {'; '.join(map(str, refused))}")
    refuse_shorter_run(paths, config)
    refuse_larger_validation(paths, stored, config)
    return [change for change in allowed if not same_folder(change, config)]


def same_folder(change: ConfigChange, config: RunConfig) -> bool:
    """An ``output_dir`` change that names the folder being resumed another way (``runs/x`` -> ``/home/me/runs/x``,
    as the resume line printed after a stop spells it): no change, nothing to say or store."""
    if change.key != "output_dir" or not isinstance(change.before, str) or not isinstance(change.after, str):
        return False
    from pathlib import Path

    def folder(text: str) -> Path:
        return Path(text.format(pool=config.pool.name, regime=config.regime.name)).resolve()

    try:
        return folder(change.before) == folder(change.after)
    except (KeyError, IndexError, ValueError):  # a placeholder the run's name does not fill: another spelling
        return False


def refuse_shorter_run(paths: RunPaths, config: RunConfig) -> None:
    """``--resume`` with a run length below a step the run already trained to would delete that checkpoint, the
    final model and the rows after it: refused, naming what it would cost (``--resume`` deletes no finished work)."""
    from mutualrl.launch.rundir.resume import furthest_step

    steps = max_optimizer_steps(config)
    trained = furthest_step(paths, [p.name for p in config.pool.policies])
    if steps is None or steps <= 0 or trained is None or trained[0] <= steps:
        return
    raise UsageError(f"--resume: {paths.root} has trained {trained[0]} optimizer steps ({trained[1]}); a run length "
                     f"of {steps} would delete them, and --resume deletes no finished work: give --max-steps of at "
                     f"least the steps trained to go on, evaluate it as it is (mutualrl eval {paths.root}), or start "
                     "a shorter run with --output-dir")


def refuse_larger_validation(paths: RunPaths, stored: RunConfig, config: RunConfig) -> None:
    """A resumed run validates on its held-out copy (``RUN/data/eval.jsonl``), cut to ``validation.limit`` (or
    ``task.eval_limit``) as it started: a smaller ``validation.limit`` is applied to that copy; a larger one (or
    none, after a limit) cannot be, and is refused rather than recorded and ignored."""
    before = stored.validation.limit if stored.validation.limit is not None else stored.task.eval_limit
    after = config.validation.limit if config.validation.limit is not None else config.task.eval_limit
    if before is None or (after is not None and after <= before):
        return
    raise UsageError(f"--resume: validation.limit {after if after is not None else 'unset'}: {paths.root} keeps "
                     f"{before} held-out prompts ({paths.data / 'eval.jsonl'}, cut as the run started), so a resume "
                     f"validates on at most {before}: set validation.limit <= {before}, or start a new run with "
                     "--output-dir to validate on more")


def prepare_resume(paths: RunPaths, config: RunConfig, allowed: list[ConfigChange],
                   console: Console) -> tuple[RunConfig, int | None]:
    """Store the allowed setting changes and roll the folder back to the restart step.

    Returns the config to run (the stored one with the ``allowed`` changes) and the last
    checkpoint step common to every policy, or None when there is none yet (start from 0).
    """
    if allowed:
        console.print(f"resume: changed {'; '.join(map(str, allowed))}", highlight=False)
        if any(change.key.endswith("max_steps") for change in allowed):
            console.print(f"resume: the learning-rate schedule now spans the new length ({max_optimizer_steps(config)} "
                          "optimizer steps): from the checkpoint on, every step trains at the rate that schedule "
                          "gives it (a rate that had decayed to its end rises again when the run is lengthened)",
                          highlight=False, soft_wrap=True)
        write_resolved_config(paths, config, read_source(paths) or "resume")
    policies = [p.name for p in config.pool.policies]
    damaged: list[str] = []
    found: list[str] = []
    step = common_checkpoint(paths, policies, max_optimizer_steps(config), damaged, found)
    for problem in damaged:
        console.print(f"[yellow]warning:[/] skipping a damaged checkpoint: {escape(problem)}", highlight=False,
                      soft_wrap=True)  # one line, whatever the path's length (a log is read with grep)
    for line in found:  # what else the checkpoints hold: said, never taken
        console.print(f"[yellow]note:[/] {escape(line)}", highlight=False, soft_wrap=True)
    if step is None:
        console.print("resume: no checkpoint common to every policy yet: starting again from step 0", highlight=False)
        return config, None
    removed = rollback_exchange(paths.see_root(config.see.dir), step)
    notes: list[str] = []
    dropped = rollback_metrics(paths, policies, step, notes)
    for note in notes:
        console.print(f"[yellow]warning:[/] {escape(note)}", highlight=False, soft_wrap=True)
    console.print(f"resuming every policy from checkpoint-{step} (removed {removed} SEE step folders; dropped "
                  f"{dropped} metric rows after it or damaged: steps after it are trained again)", highlight=False)
    for policy in policies:  # stale status from the stopped run
        paths.status(policy).unlink(missing_ok=True)
    return config, step


def prepared_train_prompts(paths: RunPaths) -> int | None:
    """The train prompts the prepared run folder holds (after the joint length filter: what the workers read), for
    the plan's check that one step's batch fills; None where the folder holds none (a machine K > 0 before machine 0
    wrote them)."""
    from mutualrl.training.data import TRAIN_FILE

    try:
        with (paths.data / TRAIN_FILE).open("rb") as rows:
            return sum(1 for line in rows if line.strip())
    except OSError:
        return None

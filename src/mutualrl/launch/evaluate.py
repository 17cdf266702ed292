"""What ``mutualrl eval`` and ``mutualrl.evaluate`` run: greedy reward@1 of a run folder's final models, of a pool's
or recipe's models, or of models named on the command line, on a task suite.

The target and the options resolve to the models, the tasks and their settings (each option as given, else the
recipe's, else the task's own), the prompts (a run folder's own held-out copy when its own task is scored) and the
scoring (the recipe's reward functions, ``--reward-funcs``, or a verifier mode); then every model is evaluated
(:func:`mutualrl.evaluation.runner.run_eval`) and the results come back with their metadata. The command writes them
to files, the Python API returns them. In ``launch/``, not ``evaluation/``: a run folder's held-out copy is checked
against the run's record (:mod:`mutualrl.launch.rundir.inputs`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from mutualrl.errors import UsageError

REWARD_FUNCS_OPTION = "--reward-funcs"


@contextmanager
def shown_progress(shown: bool, console: Any = None) -> Iterator[tuple[Callable[[str], None], Any]]:
    """``(on_status, progress_factory)`` for :func:`~mutualrl.evaluation.runner.run_eval`: where ``shown``, on
    ``console`` (default: standard error) bars in a terminal, and piped (a log, CI), where a bar draws nothing until
    it ends, a line at least every few seconds (:func:`~mutualrl.launch.said_progress.said_progress`); else
    nothing."""
    if not shown:
        yield print_nothing, None
        return
    from mutualrl.launch.said_progress import said_progress

    with said_progress(console or Console(stderr=True, soft_wrap=True), "eval", "prompts") as sinks:
        yield sinks


def run_eval_command(
    target: str,
    suite: str | None,
    *,
    limit: int | None,
    split: str | None,
    source: str | None,
    max_new_tokens: int | None,
    batch_size: int | None,
    device: str,
    backend: str,
    verifier: str | None,
    chat_template: bool | None,
    tokenizer: str | None,
    max_prompt_tokens: int | None,
    log: Any = None,
    bars: bool = True,
    bar_console: Any = None,
    reward_funcs: list[str] | None = None,
    group_column: str | None = None,
) -> tuple[list[Any], dict[str, Any]]:
    """Resolve everything from the target and the options; evaluate; results and metadata (status lines: ``log``,
    default standard output; the progress bars: ``bar_console``, default standard error)."""
    log = log or Console()
    from mutualrl.evaluation.generate import scoring_label
    from mutualrl.evaluation.runner import pick_backend, pick_device, resolve_targets, run_eval

    device = pick_device(device)
    backend = pick_backend(backend, device)  # checked before anything is loaded
    chosen = (run_folder_targets(target, tokenizer=tokenizer, chat_template=chat_template)
              or resolve_targets(target, tokenizer=tokenizer, chat_template=chat_template))
    recipe = chosen.recipe
    settings = eval_settings(recipe, suite, source=source, verifier=verifier, max_new_tokens=max_new_tokens,
                             batch_size=batch_size, max_prompt_tokens=max_prompt_tokens, reward_funcs=reward_funcs,
                             group_column=group_column)
    tasks, scoring = settings.tasks, settings.scoring
    examples = eval_prompts(chosen, settings, split=split, source=source, limit=limit, log=log)
    check_eval_columns(settings.scoring, examples, settings.source, REWARD_FUNCS_OPTION if reward_funcs else None)
    log.print(
        f"[bold]eval[/] {len(chosen.targets)} model(s) x {len(tasks)} task(s) ({len(examples)} prompts), "
        f"greedy, max {settings.max_new_tokens} new tokens, {scoring_label(scoring)}",
        highlight=False,
    )
    quiet_transformers()
    start = time.perf_counter()
    with shown_progress(bars, bar_console) as (on_status, factory):
        results, dropped = run_eval(
            chosen.targets,
            examples,
            max_new_tokens=settings.max_new_tokens,
            batch_size=settings.batch_size,
            device=device,
            backend=backend,
            verifier=scoring,
            max_prompt_tokens=settings.max_prompt_tokens,
            split=split,
            on_status=on_status,
            progress_factory=factory,
        )
    say_prompt_forms(results, dropped, settings.max_prompt_tokens, log)
    return results, eval_meta(target, chosen, settings, split=split, limit=limit, results=results, examples=examples,
                              dropped=dropped, start=start)


def eval_prompts(chosen: Any, settings: EvalSettings, *, split: str | None, source: str | None, limit: int | None,
                 log: Any) -> list[Any]:
    """The prompts to score: a run folder's own held-out ones (:func:`run_held_out`), else the suite's, read as
    ``settings`` say (the recipe's own task as the recipe configures it)."""
    from mutualrl.evaluation.runner import load_suite

    own = run_held_out(chosen, settings.tasks, split=split, source=source, limit=limit, log=log)
    task_config = chosen.recipe.task if chosen.recipe is not None else None
    with log.status(f"loading {', '.join(settings.tasks)} prompts ..."):
        return own if own is not None else load_suite(settings.tasks, split=split, source=settings.source,
                                                      limit=limit, task_config=task_config)


def eval_meta(target: str, chosen: Any, settings: EvalSettings, *, split: str | None, limit: int | None,
              results: list[Any], examples: list[Any], dropped: int, start: float) -> dict[str, Any]:
    """The results' metadata: what was evaluated, on which prompts, how it was scored, the seconds since ``start``
    (:func:`time.perf_counter`) and reward@1 per group (:func:`group_breakdown`)."""
    from mutualrl.evaluation.generate import scoring_label

    return {
        "target": target,
        "label": chosen.label,
        "suite": settings.suite,
        "tasks": settings.tasks,
        "splits": eval_splits(settings.tasks, split, chosen.recipe),
        "source": settings.source,
        "limit": limit,
        "max_new_tokens": settings.max_new_tokens,
        "verifier": scoring_label(settings.scoring),
        "dropped_too_long": dropped,
        "seconds": round(time.perf_counter() - start, 3),
        **group_breakdown(results, examples, settings.tasks, settings.group_column),
    }


def say_prompt_forms(results: list[Any], dropped: int, max_prompt_tokens: int | None, log: Any) -> None:
    """One line per model: prompted in its chat template or as plain text (a chat model scored on plain text, or
    the reverse, scores near 0: always said); and the prompts dropped as too long."""
    for r in results:
        form = "the chat template" if r.settings.get("chat_template") else "plain text"
        log.print(f"{r.name}: prompts as {form} (--chat-template/--no-chat-template to change)", highlight=False)
        ignored = r.settings.get("from_model", {}).get("ignored") or []
        if ignored:  # greedy is greedy: the model's sampling and penalty settings are not taken
            log.print(f"{r.name}: greedy decoding takes only the EOS ids from its generation config, not "
                      f"{', '.join(ignored[:4])}{' ...' if len(ignored) > 4 else ''}", highlight=False, markup=False)
    if dropped:
        log.print(f"[yellow]dropped {dropped} prompt(s) longer than {max_prompt_tokens} tokens for some model[/]")


def group_breakdown(results: list[Any], examples: list[Any], tasks: list[str], column: str | None) -> dict[str, Any]:
    """``{"groups": {"column": ..., "reward@1": {model: {value: reward@1}}}}`` with ``task.group_column`` (or
    ``--group-column``); empty without one. A column no row has is one line naming the columns there are."""
    if column is None:
        return {}
    from mutualrl.tasks.registry import task_groups

    group_of = task_groups(tasks[0], examples, column)
    if examples and not group_of:
        raise UsageError(f"group column {column!r}: no row evaluated has it (their columns: "
                         f"{', '.join(sorted(examples[0].as_row()))})")
    return {"groups": {"column": column, "reward@1": {r.name: r.reward_at_1_by_group(group_of) for r in results}}}


@dataclass
class EvalSettings:
    """What ``mutualrl eval`` runs with: each option as given, else the recipe's (a pool's, a run's), else the
    defaults."""

    suite: str
    tasks: list[str]
    source: str | None
    scoring: Any  # a verifier mode, or the recipe's RewardSpec (recipe_scoring)
    max_new_tokens: int
    batch_size: int
    max_prompt_tokens: int | None
    group_column: str | None = None  # results per value of this column (task.group_column, --group-column)


def eval_settings(
    recipe: Any,
    suite: str | None,
    *,
    source: str | None,
    verifier: str | None,
    max_new_tokens: int | None,
    batch_size: int | None,
    max_prompt_tokens: int | None,
    reward_funcs: list[str] | None = None,
    group_column: str | None = None,
) -> EvalSettings:
    """The options not given, from ``recipe`` (None for models named on the command line), then the task's own
    (its completion length), then the defaults; ``reward_funcs`` (``--reward-funcs``) score instead of the
    recipe's."""
    from mutualrl.tasks.registry import get_task, resolve_suite
    from mutualrl.tasks.verifiers import check_mode

    if suite is None:
        suite = recipe.task.name if recipe is not None else "math"
    tasks = resolve_suite(suite)
    if recipe is not None:
        source = source if source is not None else recipe.task.source
        verifier = verifier or recipe.task.verifier
        max_prompt_tokens = max_prompt_tokens if max_prompt_tokens is not None else recipe.task.max_prompt_tokens
        if max_new_tokens is None:
            max_new_tokens = recipe.validation.max_new_tokens or recipe.grpo.get("max_completion_length")
        batch_size = batch_size or recipe.validation.batch_size
        if group_column is None and tasks == [recipe.task.name]:
            group_column = recipe.task.group_column
    if max_new_tokens is None:
        max_new_tokens = task_completion_tokens(tasks)
    verifier = check_mode(verifier or "default")
    scoring = named_scoring(tasks, verifier, reward_funcs) if reward_funcs else recipe_scoring(recipe, tasks, verifier)
    unscored = [t for t in tasks if isinstance(scoring, str) and not get_task(t).has_verifier]
    if unscored:
        raise UsageError(f"task {unscored[0]!r} has no built-in verifier: name its reward functions with "
                         f"{REWARD_FUNCS_OPTION} module.function (as task.reward_funcs in a recipe)")
    return EvalSettings(suite=suite, tasks=tasks, source=source, scoring=scoring,
                        max_new_tokens=int(max_new_tokens or 1024), batch_size=int(batch_size or 16),
                        max_prompt_tokens=max_prompt_tokens, group_column=group_column)


def task_completion_tokens(tasks: list[str]) -> int | None:
    """The longest of the tasks' own completion lengths (:attr:`Task.completion_tokens`); None when one has none."""
    from mutualrl.tasks.registry import get_task

    lengths = [get_task(t).completion_tokens for t in tasks]
    return None if None in lengths else max(lengths)  # type: ignore[type-var]


def named_scoring(tasks: list[str], verifier: str, reward_funcs: list[str]) -> Any:
    """``--reward-funcs``: a :class:`RewardSpec` of one task (its verifier first, if it has one, as in training)
    and the named functions, weights 1; every name resolved now, as ``task.reward_funcs`` is before a launch."""
    from mutualrl.tasks.reward_funcs import RewardSpec, check_reward_spec

    if len(tasks) != 1:
        raise UsageError(f"--reward-funcs scores one task; the suite has {len(tasks)} ({', '.join(tasks)})")
    spec = RewardSpec(task=tasks[0], verifier=verifier, funcs=tuple(reward_funcs))
    check_reward_spec(spec, key=REWARD_FUNCS_OPTION)
    return spec


def check_eval_columns(scoring: Any, examples: list[Any], source: str | None, option: str | None) -> None:
    """Every required parameter of the reward functions (``option``: ``--reward-funcs``, else the recipe's) is a
    column of every row evaluated: one line otherwise, before any model is loaded."""
    from mutualrl.tasks.reward_funcs import REWARD_FUNCS_KEY, RewardSpec, check_reward_columns

    if not isinstance(scoring, RewardSpec) or not examples:
        return
    columns = set.intersection(*(set(example.as_row()) for example in examples))
    check_reward_columns(scoring, columns, f"--source {source}" if source else f"task {scoring.task}'s rows",
                         option=option or REWARD_FUNCS_KEY)


def eval_splits(tasks: list[str], split: str | None, recipe: Any) -> dict[str, str]:
    """Each task's split: ``split`` when given, else the task's evaluation split (the recipe's own task as the
    recipe configures it)."""
    from mutualrl.tasks.registry import get_task, task_from_config

    return {t: split or (task_from_config(recipe.task) if recipe is not None and recipe.task.name == t
                         else get_task(t)).default_eval_split for t in tasks}


def recipe_scoring(recipe: Any, tasks: list[str], verifier: str) -> Any:
    """How to score: the recipe's own reward functions and weights when its task is the one evaluated (a run's
    held-out validation and ``eval`` then agree), else the verifier mode."""
    if recipe is None or tasks != [recipe.task.name]:
        return verifier
    from dataclasses import replace

    from mutualrl.tasks.reward_funcs import RewardSpec, reward_spec

    from mutualrl.tasks.reward_funcs import check_reward_spec

    spec: RewardSpec = replace(reward_spec(recipe.task, recipe.grpo), verifier=verifier)
    if not spec.funcs and spec.uses_verifier():
        return verifier
    check_reward_spec(spec)  # before any model loads: an import error, a function shipped by value not passed again
    return spec


def run_held_out(chosen: Any, tasks: list[str], *, split: str | None, source: str | None,
                 limit: int | None, log: Any = None) -> list[Any] | None:
    """A run folder's own held-out prompts (``RUN/data/eval.jsonl``, what its validation scored), when its own
    task is evaluated without another ``--source`` or ``--split``; None otherwise. A ``limit`` beyond them is
    :func:`beyond_held_out`'s (said in one line on ``log``). A changed data copy is refused (and a user module that
    is not what the run recorded, as its config was read: config/recorded_code.py)."""
    if chosen.run_folder is None:
        return None
    from mutualrl.launch.rundir.inputs import held_out_copy
    from mutualrl.run_folder import RunPaths

    paths = RunPaths(chosen.run_folder)
    if source is not None or split is not None or tasks != [chosen.recipe.task.name]:
        return None
    own = held_out_copy(paths, None)
    if not own or limit is None or limit <= len(own):
        return own[:limit] or None
    return beyond_held_out(chosen.recipe, own, limit, chosen.run_folder, log or Console())


def beyond_held_out(recipe: Any, own: list[Any], limit: int, run_folder: Path, log: Any) -> list[Any]:
    """``--limit N`` above the run's own held-out prompts: when the run validated on the first ``validation.limit``
    (else ``task.eval_limit``) prompts of its task's held-out split, the first N of that split, read from the run's
    ``task.source`` (the run's own come first: a source that now begins otherwise is refused in one line naming
    ``--split``); else the run's own, all of the split there is. Said in one line either way."""
    from mutualrl.tasks.registry import task_from_config

    cut = recipe.validation.limit if recipe.validation.limit is not None else recipe.task.eval_limit
    name, split = recipe.task.name, recipe.task.eval_split
    if cut is None or cut >= limit:
        log.print(f"eval: --limit {limit}: {run_folder} holds {len(own)} held-out prompts, all of {name}'s {split} "
                  "split within task.max_prompt_tokens; scoring them", highlight=False, soft_wrap=True, markup=False)
        return own
    rows = task_from_config(recipe.task).load(split, recipe.task.source, limit)
    if not begins_with(rows[:cut], own):
        raise UsageError(f"--limit {limit}: {run_folder} validated on {len(own)} held-out prompts, and "
                         f"{recipe.task.source or name} no longer begins its {split} split with them (changed since "
                         f"the run); score the split as it is now with --split {split}, or the run's own with "
                         f"--limit {len(own)}")
    log.print(f"eval: --limit {limit} is more than the {len(own)} held-out prompts {run_folder} validated on "
              f"(validation.limit {cut}): scoring the first {len(rows)} of {name}'s {split} split, the run's own "
              "first", highlight=False, soft_wrap=True, markup=False)
    return rows


def begins_with(rows: list[Any], own: list[Any]) -> bool:
    """``own`` (a run's held-out copy: a length filter dropped some) is ``rows`` in order, less some rows."""
    remaining = iter((row.prompt, str(row.answer)) for row in rows)
    return all(any(item == (kept.prompt, str(kept.answer)) for item in remaining) for kept in own)


def print_nothing(message: str) -> None:
    """The status callback of a quiet evaluation (``mutualrl.evaluate(..., progress=False)``)."""


def run_folder_targets(target: str, tokenizer: str | None, chat_template: bool | None) -> Any:
    """A run folder -> every policy's final model with the run's own settings (task, lengths, tokenizers);
    None when ``target`` is not a run folder. A policy without a final model is an error naming its checkpoints."""
    from mutualrl.config.loader import load_run_config
    from mutualrl.evaluation.runner import EvalTarget, TargetSet
    from mutualrl.run_folder import RunPaths

    paths = RunPaths(Path(target.strip()))
    if "," in target or not paths.config.is_file() or not paths.policies.is_dir():
        return None
    from mutualrl.config.plugins import open_run_folder
    from mutualrl.run_folder import launch_folders

    open_run_folder(paths.root, launch_folders(paths))  # a run folder is data: no code is imported from inside it
    config = load_run_config(str(paths.config), check_grpo=False).config
    unfinished = [p.name for p in config.pool.policies if not has_final_model(paths.final_model(p.name))]
    if unfinished:
        raise UsageError(unfinished_message(target, paths, unfinished))
    targets = [EvalTarget(name=f"{p.name}/final", model=str(paths.final_model(p.name)),
                          tokenizer=tokenizer or p.tokenizer,
                          chat_template=bool(p.chat_template) if chat_template is None else chat_template,
                          dtype=p.dtype, base_model=p.model,  # a LoRA policy's final/ is its adapter
                          init_adapter=p.init_adapter, init_adapter_build=p.init_adapter_build)
               for p in config.pool.policies]
    return TargetSet(targets, f"{paths.root.resolve().name}-final", config, run_folder=paths.root)


def has_final_model(folder: Path) -> bool:
    """A policy's final/ holds its model: full weights, or a LoRA policy's adapter."""
    from mutualrl.pools.loading import is_adapter_folder

    return (folder / "config.json").is_file() or is_adapter_folder(str(folder))


def unfinished_message(target: str, paths: Any, unfinished: list[str]) -> str:
    """Why a run folder has no final model, as run.json tells it, and the checkpoints to evaluate instead."""
    from mutualrl.run_folder import read_json_or

    status = read_json_or(paths.run_json, {}).get("status")
    why = {"running": "it is still training (or its launcher was killed)", "interrupted": "it was interrupted",
           "failed": "it failed", "done": "it finished, yet the final model is missing"}.get(
               status, f"run.json says {status!r}" if status else "it has no run.json")
    saved = sorted(str(c) for name in unfinished for c in paths.policy_dir(name).glob("checkpoint-*"))
    hint = (f"evaluate its checkpoints instead: {', '.join(saved)}" if saved else "and no checkpoint was saved yet")
    resume = " (mutualrl train --resume -o RUN finishes it)" if status in ("interrupted", "failed") else ""
    return (f"{target}: no final model for {', '.join(unfinished)}: {why}{resume}; {hint}")


def quiet_transformers() -> None:
    # Our own progress bars replace transformers' per-model "Loading weights" bars; the libraries' warnings
    # and log lines would bury the table.
    from transformers.utils import logging as hf_logging

    from mutualrl.host.quiet_libraries import quiet_third_party

    quiet_third_party()

    hf_logging.disable_progress_bar()

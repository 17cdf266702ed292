"""The go/no-go of ``mutualrl train --dry-run`` and ``mutualrl sweep --dry-run``: before anything long starts, every
policy of the pool scores a small sample of the task's training rows greedily (as a run's step-0 validation scores
its held-out rows), and the console says each one's reward@1, how many of its failures a peer solves, and what that
means for a run (:mod:`mutualrl.evaluation.go_no_go`).

It runs by default where the rows are the user's own (a local ``task.source``): the path where a pool that cannot
learn or share on them costs an afternoon. ``--check-rows 0`` skips it; ``--check-rows N`` sets the sample (on any
task); ``--check-save FILE`` writes the scores as an eval file for ``mutualrl complementarity FILE``'s full tables.
A dry run planning another machine (``--gpus N`` beyond this one's, several ``--nodes``) loads no model, nor does
the default check on a machine without a GPU for a pool over :data:`CPU_CHECK_MAX_PARAMS` or models not on it: the
check is said skipped, and how to run it.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

from rich.console import Console

from mutualrl.errors import MutualRLError, UsageError

DEFAULT_CHECK_ROWS = 32
"""Rows the check scores by default: enough to see a pool at 0 or at 1, and a few seconds on the tiny pool."""
CHECK_ROWS_FLAG = "--check-rows"
CHECK_SAVE_FLAG = "--check-save"


def check_rows_for(given: int | None, local_rows: bool) -> int:
    """How many rows to score: ``given`` (``--check-rows``), else :data:`DEFAULT_CHECK_ROWS` where the task's rows are
    the user's own (``local_rows``), else 0 (a built-in or hub task: skipped unless asked)."""
    if given is not None:
        return given
    return DEFAULT_CHECK_ROWS if local_rows else 0


CPU_CHECK_MAX_PARAMS = 1.0e9
"""Without a GPU, the default check scores pools up to this many parameters in all (the tiny and smol pools: seconds
to a minute); a larger one, or models not on this machine, only when asked (``--check-rows N``)."""


def elsewhere(config: Any, asked: bool) -> str | None:
    """Why this machine does not run the check as the run would (a planned node that is not this one; unless
    ``asked``, models too large for its CPU or not on it), or None."""
    import torch

    if config.launch.nodes > 1:
        return f"the run spans {config.launch.nodes} machines"
    gpus = config.launch.gpus
    if gpus is not None and gpus > torch.cuda.device_count():
        return f"--gpus {gpus} plans another machine (this one has {torch.cuda.device_count()})"
    if asked or torch.cuda.is_available():
        return None
    from mutualrl.launch.plan.checks import local_param_count

    counts = [local_param_count(policy.model)[0] for policy in config.pool.policies]
    if None in counts:
        return "a model of the pool is not on this machine (a dry run downloads nothing)"
    if sum(counts) > CPU_CHECK_MAX_PARAMS:  # type: ignore[arg-type]
        return f"the pool's {sum(counts) / 1e9:.1f}B parameters are slow to score on this CPU"  # type: ignore[arg-type]
    return None


def sample_rows(examples: list[Any], rows: int, seed: int) -> list[Any]:
    """``rows`` of ``examples`` drawn with ``seed`` (in file order; all of them when there are fewer): a file sorted
    by difficulty is not judged by its first rows."""
    if len(examples) <= rows:
        return list(examples)
    keep = sorted(random.Random(seed).sample(range(len(examples)), rows))
    return [examples[i] for i in keep]


def run_pool_check(config: Any, rows: int, console: Console, train: list[Any] | None = None,
                   save: Path | None = None, asked: bool = False) -> None:
    """Score the pool on ``rows`` training rows (``train``: the rows already read, else the task's) and print the
    go/no-go; ``save``: also the eval file. Nothing happens for ``rows`` 0; where this machine does not run it
    (:func:`elsewhere`; ``asked``: ``--check-rows`` given) it is said and skipped. A failure (a model that does not
    load, a reward function that raises on a completion) is one line naming ``--check-rows 0``, which skips it."""
    if rows <= 0:
        return
    why_not = elsewhere(config, asked)
    if why_not is not None:
        hint = "run the dry run on the machine itself" if asked else f"{CHECK_ROWS_FLAG} {rows} scores it here anyway"
        console.print(f"go/no-go: skipped: {why_not}; {hint}", highlight=False, soft_wrap=True, markup=False)
        return
    try:
        results, examples = score_sample(config, rows, console, train)
    except MutualRLError as err:
        raise UsageError(f"go/no-go ({CHECK_ROWS_FLAG} {rows}): {err}; {CHECK_ROWS_FLAG} 0 skips the check") from None
    if save is not None:
        from mutualrl.evaluation.results import save_eval_file

        save_eval_file(save, results, {"target": f"go/no-go of pool {config.pool.name}", "tasks": [config.task.name],
                                       "split": config.task.train_split, "rows": len(examples)})
    print_check(config, results, rows, console, save)


def score_sample(config: Any, rows: int, console: Console, train: list[Any] | None) -> tuple[list[Any], list[Any]]:
    """Every policy's greedy results on a sample of ``rows`` training rows, scored by the run's reward functions
    with its validation's completion length; and the rows."""
    from mutualrl.launch.evaluate import eval_settings

    settings = eval_settings(config, None, source=None, verifier=None, max_new_tokens=None, batch_size=None,
                             max_prompt_tokens=None)
    if train is None:
        from mutualrl.tasks.registry import task_from_config

        train = task_from_config(config.task).load(config.task.train_split, config.task.source, None)
    examples = sample_rows(train, rows, config.task.split_seed)
    console.print(f"go/no-go: scoring {len(config.pool.policies)} policies on {len(examples)} training rows (greedy, "
                  f"at most {settings.max_new_tokens} new tokens) ...", highlight=False, soft_wrap=True, markup=False)
    from mutualrl.evaluation.runner import recipe_targets, run_eval  # said first: the libraries take a while to load
    from mutualrl.launch.evaluate import quiet_transformers
    from mutualrl.launch.said_progress import said_progress

    quiet_transformers()

    with said_progress(console, "go/no-go", "rows") as (on_status, factory):
        results, _ = run_eval(recipe_targets(config), examples, max_new_tokens=settings.max_new_tokens,
                              batch_size=settings.batch_size, backend="transformers", verifier=settings.scoring,
                              max_prompt_tokens=settings.max_prompt_tokens, split=config.task.train_split,
                              on_status=on_status, progress_factory=factory)
    return results, examples


def print_check(config: Any, results: list[Any], rows: int, console: Console, save: Path | None) -> None:
    """The check's lines (:func:`mutualrl.evaluation.go_no_go.check_lines`) and how to see more."""
    from mutualrl.evaluation.complementarity import align
    from mutualrl.evaluation.go_no_go import check_lines, policy_checks, success_threshold, verdict

    out = align(results)
    threshold, why = success_threshold(out.scores)
    out = dataclasses.replace(out, threshold=0.5 if threshold is None else threshold)
    source = config.task.source or config.task.name
    console.print(f"go/no-go: the pool on {len(out.prompt_ids)} of {source}'s training rows, before training:",
                  highlight=False, soft_wrap=True, markup=False)
    checks = policy_checks(out)
    for line in [*check_lines(checks, len(out.prompt_ids), threshold, why), *stop_warnings(config, out)]:
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    # a model that cannot, or a reward that never says right (or never differs)?
    if threshold is None or verdict(checks).kind == "nothing-to-learn":
        for result in results:
            shown = result.records[0]
            console.print(f"  e.g. {result.name} on {shown.prompt[:80]!r}: {shown.completion[:80]!r} (answer "
                          f"{shown.answer[:40]!r}) scored {shown.score:g}", highlight=False, soft_wrap=True,
                          markup=False)
    tables = (f"mutualrl complementarity {save}" if save is not None
              else f"add {CHECK_SAVE_FLAG} check.json, then mutualrl complementarity check.json")
    console.print(f"  more: {CHECK_ROWS_FLAG} {max(4 * rows, 200)} for a larger sample; the full tables (overlap, "
                  f"difficulty, which regime can use each prompt): {tables}; skip the check: {CHECK_ROWS_FLAG} 0",
                  highlight=False, soft_wrap=True, markup=False)


def stop_warnings(config: Any, out: Any) -> list[str]:
    """A line per policy none of whose sampled completions scored above 0 in a run long enough for the no-reward stop
    (``task.stop_after_no_reward_steps``) to end it: the stop, who it ends first, and how to keep the run."""
    import numpy as np

    from mutualrl.config.cadence import max_optimizer_steps
    from mutualrl.regimes.core.registry import get_regime

    stop_after, steps = config.task.stop_after_no_reward_steps, max_optimizer_steps(config)
    if not stop_after or (isinstance(steps, int) and steps < stop_after):
        return []
    peers = get_regime(config.regime.name).needs_peers
    lines = []
    for k, name in enumerate(out.models):
        if float(np.nanmax(out.scores[:, k], initial=0.0)) > 0.0:
            continue
        who = ("under this regime a peer's success counts as signal, so it goes on while a peer scores, but a "
               "standalone baseline of it would be stopped" if peers else "this run would be stopped")
        lines.append(f"  warning: {name} scored nothing above 0 on the sample: a policy whose completions score "
                     f"nothing for {stop_after} steps in a row (task.stop_after_no_reward_steps) stops the run"
                     f"{f' ({steps} steps planned)' if steps else ''}; {who}. --set "
                     "task.stop_after_no_reward_steps=0 trains it to the end")
    return lines


def check_save_path(save: Path | None, rows: int | None) -> None:
    """``--check-save`` needs a check to save (not with ``--check-rows 0``)."""
    if save is not None and rows == 0:
        raise UsageError(f"{CHECK_SAVE_FLAG}: saves the go/no-go's scores; not with {CHECK_ROWS_FLAG} 0")

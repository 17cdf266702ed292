"""The Python API: ``mutualrl.train``, ``mutualrl.load_config``, ``mutualrl.evaluate``.

The same run as the command line, not a second launcher: :func:`train` builds the
:class:`~mutualrl.launch.run.TrainOptions` that ``mutualrl train`` builds and calls
:func:`~mutualrl.launch.run.run_train` (same run folder, lock, resume, summary), then reads the
folder back into a :class:`RunResult`. ``import mutualrl`` stays light: the package's
``__getattr__`` imports this module on first use only.

Reward functions may be given as callables, as ``GRPOTrainer(reward_funcs=[...])`` takes them.
Policies train in other processes: a module-level function of an importable module goes to them by its
import path; one defined in ``__main__`` or a notebook, a lambda or a closure is pickled with cloudpickle
and shipped by value (:mod:`mutualrl.tasks.shipped_rewards`: the workers load only the bytes this process
wrote). A function that cannot be pickled, or that a policy process could not load, is refused, saying why.
A run trained with a shipped function is evaluated or resumed by passing the function again (``reward_funcs=``).
"""

from __future__ import annotations

import functools
import io
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mutualrl.config.schema import RunConfig
from mutualrl.errors import MutualRLError, UsageError

Overrides = Mapping[str, Any] | Sequence[str] | None
INTERRUPTED_EXIT = 130
"""What ``run_train`` returns for a run stopped by Ctrl-C, SIGTERM or SIGHUP (128 + SIGINT, as a shell says)."""


@dataclass
class RunResult:
    """What a finished run left in its folder: the summary, every policy's final model, the metrics rows."""

    run_dir: Path
    summary: dict[str, Any]
    models: dict[str, Path]
    metrics: list[dict[str, Any]] = field(repr=False)
    accepted_code: tuple[str, ...] = field(default=(), repr=False)
    """The modules the :func:`train` call that returned this result accepted (its reward functions, overrides and
    recipe naming code): :func:`evaluate` of this result accepts them again. None from :func:`read_run`: a folder
    read back vouches for no code."""

    def metric_rows(self, kind: str = "train", policy: str | None = None) -> list[dict[str, Any]]:
        """The logged metrics rows of one kind, optionally of one policy: ``train`` (a row per logged step: reward,
        loss, the regime's figures) or ``eval`` (a row per validation: held-out reward@1). Not data rows: the
        prompts are the task's (``RUN/data/``)."""
        return [r for r in self.metrics if r.get("kind") == kind and (policy is None or r.get("policy") == policy)]

    def rows(self, kind: str = "train", policy: str | None = None) -> list[dict[str, Any]]:
        """:meth:`metric_rows` under its earlier name."""
        return self.metric_rows(kind, policy)

    def held_out(self) -> dict[str, tuple[float | None, float | None]]:
        """Each policy's held-out greedy reward@1, (before, after) training."""
        return {name: (p.get("eval_before"), p.get("eval_after")) for name, p in self.summary["policies"].items()}


def as_one_command(func: Callable[..., Any]) -> Callable[..., Any]:
    """An API call is one command, as a CLI process is: the modules it accepts (``allow_code``, its overrides and
    recipe naming code) are accepted for this call only (:func:`mutualrl.config.recorded_code.one_command`)."""

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        from mutualrl.config.recorded_code import one_command

        with one_command():
            return func(*args, **kwargs)

    return call


def reward_func_path(func: str | Callable[..., Any]) -> str:
    """A reward function as ``task.reward_funcs`` names it: an import path as given; a module-level function of an
    importable module by its path; any other callable (``__main__``, a notebook, a lambda, a closure) shipped to
    the workers by value (:func:`mutualrl.tasks.shipped_rewards.ship_by_value`)."""
    if isinstance(func, str):
        return func
    if not callable(func):
        raise UsageError(f"reward_funcs: {func!r} is neither a function nor an import path module.function")
    module, qualname = getattr(func, "__module__", None), getattr(func, "__qualname__", "")
    if module and module != "__main__" and "<" not in qualname and "." not in qualname:
        from mutualrl.config.plugins import import_object

        from mutualrl.tasks.shipped_rewards import workers_import

        try:  # importable here may be from a folder only this session put on sys.path: then by value
            if import_object(f"{module}.{qualname}", "reward_funcs") is func and workers_import(module):
                return f"{module}.{qualname}"
        except MutualRLError:  # not importable in the workers either: ship it by value
            pass
    from mutualrl.tasks.shipped_rewards import ship_by_value

    return ship_by_value(func)


def override_texts(overrides: Overrides, reward_funcs: Sequence[str | Callable[..., Any]] | None) -> list[str]:
    """``{"task.source": "data/"}`` or ``["task.source=data/"]`` -> ``--set`` texts (values as JSON, which is YAML)."""
    if overrides is None:
        texts: list[str] = []
    elif isinstance(overrides, Mapping):
        texts = [f"{key}={override_json(key, value)}" for key, value in overrides.items()]
    elif isinstance(overrides, str):
        raise UsageError("overrides: a mapping {key: value} or a list of 'KEY=VALUE' strings, not one string")
    else:
        texts = list(overrides)
    if reward_funcs is not None:
        texts.append(f"task.reward_funcs={json.dumps([reward_func_path(f) for f in reward_funcs])}")
    return texts


def override_json(key: Any, value: Any) -> str:
    """An override's value as JSON (which ``--set`` parses as YAML); a value JSON cannot hold is one line naming
    the key."""
    if not isinstance(key, str) or not key:
        raise UsageError(f"overrides: the key {key!r} is not a dotted field name such as 'grpo.learning_rate'")
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as err:
        raise UsageError(f"overrides[{key!r}]: {type(value).__name__} value {str(value)[:80]!r} is not a setting "
                         f"a recipe can hold (numbers, text, true/false, null, lists and mappings of them): {err}"
                         ) from None


def check_run_arguments(max_steps: Any, output_dir: Any) -> None:
    """The Python API's arguments checked as the CLI checks its options (``--max-steps`` >= 1, ``-o`` a path)."""
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise UsageError(f"max_steps: {max_steps!r} is not a whole number >= 1 (the run length per policy)")
    if output_dir is not None and not isinstance(output_dir, (str, os.PathLike)):
        raise UsageError(f"output_dir: {output_dir!r} ({type(output_dir).__name__}) is not a folder path")


def recipe_source(recipe_or_config: str | Path | RunConfig, folder: Path) -> str:
    """A pool name or recipe path as given; a :class:`RunConfig` written as a recipe file in ``folder``."""
    if not isinstance(recipe_or_config, RunConfig):
        return str(recipe_or_config)
    import yaml

    from mutualrl.config.typed import to_plain

    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(to_plain(recipe_or_config), sort_keys=False))
    return str(path)


@as_one_command
def load_config(recipe: str | Path = "tiny", *, regime: str | None = None, overrides: Overrides = None,
                max_steps: int | None = None, reward_funcs: Sequence[str | Callable[..., Any]] | None = None
                ) -> RunConfig:
    """The resolved, validated config ``mutualrl train`` would run (recipe + overrides), without running it."""
    from mutualrl.launch.run import TrainOptions, resolve_config

    check_run_arguments(max_steps, None)
    options = TrainOptions(pool=str(recipe), regime=regime, max_steps=max_steps,
                           overrides=override_texts(overrides, reward_funcs))
    return resolve_config(options)[0]


@as_one_command
def train(recipe_or_config: str | Path | RunConfig = "tiny", *, regime: str | None = None,
          overrides: Overrides = None, output_dir: str | Path | None = None, max_steps: int | None = None,
          reward_funcs: Sequence[str | Callable[..., Any]] | None = None, resume: bool = False,
          overwrite: bool = False, progress: bool = True, allow_code: Sequence[str] = ()) -> RunResult:
    """Train a pool, exactly as ``mutualrl train`` does, and return what the run folder holds.

    ``recipe_or_config``: a pool name, a recipe path or a :class:`RunConfig` (:func:`load_config`).
    ``overrides``: ``--set`` settings as a mapping or ``KEY=VALUE`` strings. ``reward_funcs``: import
    paths or callables (``task.reward_funcs``; a lambda or closure is shipped by value). ``progress=False``: print
    nothing. ``allow_code`` (``--allow-code``): modules a resumed run folder's config names that you accept (for this
    call only).
    A run that fails raises :class:`~mutualrl.errors.MutualRLError` naming its folder; a run stopped by Ctrl-C
    raises ``KeyboardInterrupt`` (a sweep's ``except MutualRLError`` must not go on to its next configuration).
    """
    from rich.console import Console

    from mutualrl.launch.run import TrainOptions, resolve_config, run_dir_for, run_train

    check_run_arguments(max_steps, output_dir)
    console = Console() if progress else Console(file=io.StringIO())
    with tempfile.TemporaryDirectory(prefix="mutualrl-api-") as tmp:
        options = TrainOptions(pool=recipe_source(recipe_or_config, Path(tmp)), regime=regime,
                               output_dir=Path(output_dir) if output_dir is not None else None,
                               max_steps=max_steps, overrides=override_texts(overrides, reward_funcs),
                               resume=resume, overwrite=overwrite, allow_code=list(allow_code))
        run_dir = run_dir_for(resolve_config(options)[0])
        code = run_train(options, console)
    if code == INTERRUPTED_EXIT:
        raise KeyboardInterrupt(f"training interrupted; {run_dir} is resumable (resume=True)")
    if code != 0:
        raise MutualRLError(f"training failed (exit code {code}); see {run_dir}/run.json and {run_dir}/logs/")
    from mutualrl.config.recorded_code import accepted_by_command

    result = read_run(run_dir)
    result.accepted_code = tuple(sorted(accepted_by_command()))
    return result


def read_run(run_dir: str | Path) -> RunResult:
    """A finished run folder as a :class:`RunResult`."""
    from mutualrl.config.resolved import policy_entries
    from mutualrl.run_folder import RunPaths, read_json, read_metric_rows
    from mutualrl.see.files import check_policy_name

    paths = RunPaths(Path(run_dir).resolve())
    if not paths.summary.is_file():
        raise UsageError(f"{paths.root}: no summary.json (the run did not finish)")
    names = [check_policy_name(str(p.get("name"))) for p in policy_entries(paths)]  # data: no code imported
    return RunResult(run_dir=paths.root, summary=read_json(paths.summary),
                     models={name: paths.final_model(name) for name in names},
                     metrics=[row for _, row in read_metric_rows(paths.metrics)[0]])


@as_one_command
def evaluate(target: str | Path | RunResult, suite: str | None = None, *, limit: int | None = None,
             split: str | None = None, source: str | None = None, max_new_tokens: int | None = None,
             device: str = "auto", progress: bool = True,
             reward_funcs: Sequence[str | Callable[..., Any]] | None = None,
             allow_code: Sequence[str] = ()) -> dict[str, Any]:
    """``mutualrl eval``: greedy reward@1 of a run's final models (with the run's task and reward functions),
    a pool or models; returns ``{"reward@1": {model: value}, "results": [...], "meta": {...}}``.
    ``reward_funcs`` (``--reward-funcs``): score with these instead, as :func:`train` takes them (a run trained
    with a lambda or closure is scored by passing it again: nothing is loaded from the run folder).
    ``allow_code`` (``--allow-code``): modules the run folder's config names that you accept to import (for
    this call only); a :class:`RunResult` that :func:`train` returned brings the code that call accepted."""
    from rich.console import Console

    from mutualrl.config.recorded_code import accept_code
    from mutualrl.launch.evaluate import run_eval_command

    accept_code(allow_code)
    if isinstance(target, RunResult):  # trained by this process: the code its train call accepted
        accept_code(target.accepted_code)

    name = str(target.run_dir if isinstance(target, RunResult) else target)
    log = Console() if progress else Console(file=io.StringIO())
    results, meta = run_eval_command(name, suite, limit=limit, split=split, source=source,
                                     max_new_tokens=max_new_tokens, batch_size=None, device=device, backend="auto",
                                     verifier=None, chat_template=None, tokenizer=None, max_prompt_tokens=None,
                                     log=log, bars=progress,
                                     reward_funcs=[reward_func_path(f) for f in reward_funcs or []] or None)
    return {"reward@1": {r.name: r.reward_at_1 for r in results}, "results": results, "meta": meta}

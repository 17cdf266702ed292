"""Reward functions named in a recipe (``task.reward_funcs``), resolved and combined as TRL does.

Names resolve exactly as ``trl grpo --reward_funcs`` resolves them (``trl/scripts/grpo.py``): one of TRL's
own reward names (:data:`TRL_REWARDS`), else an import path ``module.function`` looked up from the working
directory and ``PYTHONPATH`` (:mod:`mutualrl.config.plugins`). A function is called as TRL calls it,
``fn(prompts=..., completions=..., completion_ids=..., **columns)`` with every dataset column by name,
and returns one float (or None) per completion. Several functions are combined as ``GRPOTrainer``
combines them: ``nansum(rewards * grpo.reward_weights)`` (weights 1 when unset; None counts as missing).

A built-in task's verifier (:func:`mutualrl.tasks.reward.make_reward_function`) comes first and the
named functions after it, so ``grpo.reward_weights`` lists the verifier's weight first. The same
functions score training, held-out validation, ``mutualrl eval`` and ``complementarity``
(:func:`score_batch`): greedy reward@1 is the weighted reward of the greedy completion.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from mutualrl.errors import DataError, MutualRLError, UsageError
from mutualrl.tasks.shipped_rewards import is_shipped, load_shipped

REWARD_FUNCS_KEY = "task.reward_funcs"
TRL_REWARDS = ("accuracy_reward", "reasoning_accuracy_reward", "think_format_reward", "get_soft_overlong_punishment")
"""The names ``trl grpo --reward_funcs`` knows without an import path (its ``reward_funcs_registry``)."""


@dataclass(frozen=True)
class RewardSpec:
    """How a run scores completions: its task's verifier (if the task has one), its reward functions, weights."""

    task: str
    verifier: str = "default"
    funcs: tuple[str, ...] = ()
    weights: tuple[float, ...] | None = None

    def describe(self) -> str:
        """One line for eval metadata and the plan (``verifier default + mod.fn (weights 1, 0.5)``)."""
        parts = [f"verifier {self.verifier}"] if self.uses_verifier() else []
        parts += list(self.funcs)
        weights = f" (weights {', '.join(f'{w:g}' for w in self.weights)})" if self.weights else ""
        return " + ".join(parts) + weights

    def uses_verifier(self) -> bool:
        from mutualrl.tasks.registry import get_task

        return get_task(self.task).has_verifier


def reward_spec(task: Any, grpo: dict[str, Any]) -> RewardSpec:
    """The :class:`RewardSpec` of a recipe's ``task`` section and (merged) ``grpo`` fields."""
    weights = grpo.get("reward_weights")
    return RewardSpec(task=task.name, verifier=task.verifier, funcs=tuple(task.reward_funcs),
                      weights=tuple(float(w) for w in weights) if weights else None)


def resolve_reward_func(name: str, key: str = REWARD_FUNCS_KEY) -> Callable[..., Any]:
    """One name of ``task.reward_funcs`` -> the function, as ``trl grpo --reward_funcs`` resolves it."""
    if name in TRL_REWARDS:
        import trl.rewards as trl_reward_module

        func = getattr(trl_reward_module, name)
        return func(max_completion_len=1280, soft_punish_cache=256) if name == "get_soft_overlong_punishment" else func
    if is_shipped(name):
        return load_shipped(name, key)
    if "." not in name:
        raise UsageError(f"{key}: {name!r} is neither one of TRL's reward functions ({', '.join(TRL_REWARDS)}) "
                         "nor an import path module.function")
    from mutualrl.config.plugins import import_object

    func = import_object(name, key)
    if not callable(func):
        raise UsageError(f"{key}: {name!r} is not a function (got {type(func).__name__})")
    return func


def reward_functions(spec: RewardSpec, max_chars: int | None = None, key: str = REWARD_FUNCS_KEY
                     ) -> list[Callable[..., Any]]:
    """The functions TRL's ``GRPOTrainer`` gets: the task's verifier (if any, bounded in size by ``max_chars``:
    :func:`mutualrl.tasks.reward.make_reward_function`), then ``task.reward_funcs`` (named ``key`` in errors)."""
    from mutualrl.tasks.reward import make_reward_function

    funcs = [make_reward_function(spec.task, spec.verifier, max_chars=max_chars)] if spec.uses_verifier() else []
    funcs += [resolve_reward_func(name, f"{key}[{i}]") for i, name in enumerate(spec.funcs)]
    if not funcs:
        raise UsageError(f"task {spec.task!r} has no built-in verifier: name your reward functions in "
                         f"{REWARD_FUNCS_KEY} (e.g. [my_rewards.exact_match])")
    if spec.weights is not None and len(spec.weights) != len(funcs):
        names = (["verifier"] if spec.uses_verifier() else []) + list(spec.funcs)
        raise UsageError(f"grpo.reward_weights: {len(spec.weights)} weight(s) for {len(funcs)} reward function(s) "
                         f"({', '.join(names)}); give one weight per function, in that order")
    return funcs


def check_reward_spec(spec: RewardSpec, key: str = REWARD_FUNCS_KEY) -> None:
    """Resolve every function now (the launcher, the dry run): an import error names the module and the key."""
    reward_functions(spec, key=key)


TRL_ARGUMENTS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric",
                 "environments")
"""What ``GRPOTrainer._calculate_rewards`` passes besides the dataset's columns."""
TASK_COLUMNS = ("prompt_id", "answer", "task")
"""The columns a built-in task's rows hand the reward functions (:meth:`TaskExample.as_row`)."""


def required_columns(func: Callable[..., Any]) -> list[str]:
    """The parameters of ``func`` that only a dataset column can fill (named, no default, not one TRL passes)."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return []
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in parameters if p.kind in named and p.default is inspect.Parameter.empty
            and p.name not in TRL_ARGUMENTS]


def check_reward_columns(spec: RewardSpec, columns: Collection[str], origin: str,
                         option: str = REWARD_FUNCS_KEY) -> None:
    """Refuse, before the launch, a reward function's parameter that no column of ``origin`` provides (TRL would
    stop at the first step; filling it with "" would score nonsense)."""
    for i, name in enumerate(spec.funcs):
        key = f"{option}[{i}]"
        func = resolve_reward_func(name, key)
        missing = [c for c in required_columns(func) if c not in columns]
        if missing:
            if str(getattr(func, "__module__", "")).split(".")[0] == "trl":  # TRL's code: only the data can change
                fix = f"add a column named {missing[0]} (TRL's {getattr(func, '__name__', name)} reads it)"
            else:
                fix = "rename the column or the parameter, or give it a default"
            raise DataError(f"{key} {name}: parameter {missing[0]!r} is no column of {origin} (its columns: "
                            f"{', '.join(sorted(columns))}); {fix}")


TRAINING_KEYWORDS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")
"""What ``GRPOTrainer._calculate_rewards`` passes every reward function by name in training, besides each column."""


def unaccepted_keywords(func: Callable[..., Any], columns: Collection[str]) -> list[str]:
    """The keywords TRL's training call passes (:data:`TRAINING_KEYWORDS`, and every column but the prompt) that
    ``func`` takes no parameter for and no ``**kwargs`` catches: the first training step's ``TypeError``."""
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return []
    named = {p.name for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                       inspect.Parameter.KEYWORD_ONLY)}
    passed = [*TRAINING_KEYWORDS, *sorted(set(columns) - {"prompt", "completion", "completion_ids"})]
    return [name for name in passed if name not in named]


def check_training_keywords(spec: RewardSpec, columns: Collection[str], origin: str) -> None:
    """Refuse, before the launch, a reward function that training would call with a keyword it does not take (one
    line; TRL's traceback would come at the first step, after the models loaded)."""
    for i, name in enumerate(spec.funcs):
        func = resolve_reward_func(name, f"{REWARD_FUNCS_KEY}[{i}]")
        missing = unaccepted_keywords(func, columns)
        if missing:
            shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
            raise UsageError(f"{REWARD_FUNCS_KEY}[{i}] {name}: takes no **kwargs, and training calls it with "
                             f"{shown} as well (TRL passes every column of {origin} and its own arguments by "
                             "name): end its signature with **kwargs")


def check_task_columns(task: Any, task_config: Any, grpo: dict[str, Any]) -> None:
    """:func:`check_reward_columns` for the rows ``task`` will read: a ``dataset`` task's source (a local one; a
    hub dataset is checked when its rows are), a built-in task's columns; a task from elsewhere is not known."""
    spec = reward_spec(task_config, grpo)
    columns_of = getattr(task, "reward_columns", None)
    if columns_of is not None:
        found = columns_of(task_config.source)
    elif type(task).__module__.startswith("mutualrl.tasks."):
        found = [(set(TASK_COLUMNS), f"task {task.name}'s rows")]
    else:
        found = None
    for columns, origin in found or ():
        check_reward_columns(spec, columns, origin)
        check_training_keywords(spec, columns, origin)
        if task_config.group_column is not None and task_config.group_column not in columns:
            raise DataError(f"task.group_column {task_config.group_column!r} is no column of {origin} (its columns: "
                            f"{', '.join(sorted(columns))})")
    if not found:  # the columns are not known yet: TRL's own arguments are
        check_training_keywords(spec, (), f"task {task_config.name}'s rows")


def score_batch(spec: RewardSpec, prompts: Sequence[Any], completions: Sequence[Any],
                completion_ids: Sequence[Sequence[int]], columns: dict[str, list[Any]],
                funcs: list[Callable[..., Any]] | None = None) -> list[float]:
    """The combined reward of each completion, as ``GRPOTrainer`` computes it (a row all None scores 0)."""
    funcs = funcs if funcs is not None else reward_functions(spec)
    weights = spec.weights or (1.0,) * len(funcs)
    totals = [0.0] * len(completions)
    for func, weight in zip(funcs, weights, strict=True):
        try:
            rewards = list(func(prompts=list(prompts), completions=list(completions),
                                completion_ids=[list(ids) for ids in completion_ids], **columns))
        except MutualRLError:
            raise
        except (Exception, SystemExit) as err:  # a user's function: what it raised (sys.exit too), in one line
            said = " ".join(str(err).split())[:200]
            raise DataError(f"reward function {getattr(func, '__name__', func)!r} raised {type(err).__name__}"
                            f"{f': {said}' if said else ''} while scoring {len(completions)} completions") from None
        if len(rewards) != len(completions):
            raise DataError(f"reward function {getattr(func, '__name__', func)!r} returned {len(rewards)} rewards "
                            f"for {len(completions)} completions (one per completion)")
        for i, reward in enumerate(rewards):
            if reward is not None and not math.isnan(float(reward)):
                totals[i] += weight * float(reward)
    return totals


def task_summary(task: Any, grpo: dict[str, Any]) -> str:
    """What a run trains on and how it scores, one line for the dry run's plan and the run's start: the task,
    its source, where its held-out rows come from (a ``dataset`` source with one split: the fraction and seed
    drawn) and the reward functions."""
    from mutualrl.tasks.registry import task_from_config
    from mutualrl.tasks.user_dataset import DEFAULT_EVAL_FRACTION

    held = f"held-out: split {task.eval_split!r}"
    if task.name == "dataset" and task_from_config(task).holds_out(task.source):
        fraction = task.eval_fraction or DEFAULT_EVAL_FRACTION
        held = f"held-out: {fraction:g} of split {task.train_split!r}, drawn with task.split_seed={task.split_seed}"
    source = f" from {task.source}" if task.source else ""
    return (f"Task {task.name}{source}; train: split {task.train_split!r}; {held}; "
            f"reward: {reward_spec(task, grpo).describe()}")

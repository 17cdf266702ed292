"""Reward functions get prompts and completions in the form TRL gives them for the dataset, whatever each policy's
chat template.

``GRPOTrainer`` picks the form from the dataset's prompts (``is_conversational``): chat messages give each
completion as one assistant message, ``[{"role": "assistant", "content": text}]``, text prompts give strings. A
pool mixes policies with and without a chat template, and each policy's TRL sees the prompts as that policy
reads them: one without a template reads a conversational prompt flattened to text (its messages' contents
joined by blank lines), one with a template reads a text prompt as one user turn. :func:`in_dataset_form` puts
each function back in front of the dataset's own form, so one function sees one form from every policy, the
form ``GRPOTrainer`` would give it on that dataset: ``prompts`` as the dataset has them, completions as
messages (conversational prompts) or strings (text prompts).

One exception: a function whose ``completions`` parameter is annotated as message lists (TRL's own
``accuracy_reward``, ``reasoning_accuracy_reward``, ``think_format_reward``, which read
``completion[0]["content"]``) gets messages on text prompts too, where TRL would hand it strings it cannot read.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from mutualrl.tasks.base import TaskExample
from mutualrl.tasks.reward_values import checked_rewards
from mutualrl.tasks.verifiers import completion_text


def is_conversational(examples: Sequence[TaskExample]) -> bool:
    """Whether the dataset's prompts are chat messages; TRL decides by the first prompt, and so does this."""
    return bool(examples) and examples[0].meta.get("messages") is not None


def dataset_prompts(examples: Sequence[TaskExample]) -> dict[str, Any]:
    """``prompt_id`` -> the row's prompt as the dataset holds it (its messages, or its text)."""
    return {ex.prompt_id: ex.meta.get("messages") or ex.prompt for ex in examples}


def reads_messages(func: Callable[..., Any]) -> bool:
    """Whether ``func`` declares that it reads completions as message lists (``completions: list[list[dict]]``)."""
    try:
        parameter = inspect.signature(func).parameters.get("completions")
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        return False
    return parameter is not None and "dict" in str(parameter.annotation)


def shown_completions(completions: Sequence[Any], messages: bool) -> list[Any]:
    """Each completion as one assistant message (``messages``) or as text; one already in that form is kept."""
    if messages:
        return [c if isinstance(c, list) else [{"role": "assistant", "content": completion_text(c)}]
                for c in completions]
    return [c if isinstance(c, str) else completion_text(c) for c in completions]


#: Where a call is named when the functions were made without a marker (validation's scoring, which lies in
#: ``mutualrl.evaluation`` below the training callback), and what the call is doing: see :func:`calls_named_in`.
_named_in: contextvars.ContextVar[tuple[Path, str] | None] = contextvars.ContextVar("reward_calls_named_in",
                                                                                      default=None)


@contextlib.contextmanager
def calls_named_in(marker: Path, doing: str) -> Iterator[None]:
    """Inside, every reward call (of functions made without a marker of their own) is named in ``marker`` with
    ``doing`` (``scoring the validation of step 0: 4 prompts``), so that a function that hangs there is named by
    the launcher's stall limit as it is in training."""
    token = _named_in.set((marker, doing))
    try:
        yield
    finally:
        _named_in.reset(token)


class DatasetFormReward:
    """A reward function called with the dataset's prompts and completions in the dataset's form (module doc);
    TRL logs it under the function's own name."""

    def __init__(self, func: Callable[..., Any], prompts: dict[str, Any], conversational: bool,
                 call_marker: Path | None = None):
        self.func, self.prompts, self.call_marker = func, prompts, call_marker
        self.messages = conversational or reads_messages(func)
        self.__name__ = getattr(func, "__name__", type(func).__name__)

    def entering(self) -> None:
        """Name this function in :attr:`call_marker` while it runs: if it ends or hangs the process (``os._exit``,
        a deadlock), the launcher reads who did. A function that raises leaves it too; its traceback says more."""
        marker, doing = (self.call_marker, "") if self.call_marker is not None else _named_in.get() or (None, "")
        if marker is not None:
            try:
                marker.write_text("\n".join(filter(None, [self.__name__[:200], doing[:200]])))
            except OSError:  # best effort: a report's detail never stops training
                pass

    def left(self) -> None:
        marker = self.call_marker if self.call_marker is not None else (_named_in.get() or (None, ""))[0]
        if marker is not None:
            try:
                marker.unlink(missing_ok=True)
            except OSError:
                pass

    def arguments(self, prompts: Sequence[Any] | None, completions: Sequence[Any],
                  kwargs: dict[str, Any]) -> dict[str, Any]:
        ids = kwargs.get("prompt_id")
        if ids is not None and prompts is not None:
            prompts = [self.prompts.get(str(pid), prompt) for pid, prompt in zip(ids, prompts, strict=True)]
        return {**kwargs, "prompts": prompts, "completions": shown_completions(completions, self.messages)}

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """Around one call: the function named in :attr:`call_marker` (left there if it raises) and its time not
        counted as the process's work (a reward function spinning forever is a hang, not a slow step)."""
        from mutualrl.see.liveness import not_work  # here: importing the SEE loads pyarrow

        self.entering()
        with not_work():
            yield
        self.left()

    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs: Any) -> Any:
        with self.calling():
            returned = self.func(**self.arguments(prompts, completions, kwargs))
        return checked_rewards(self.__name__, returned, completions, prompts)


class AsyncDatasetFormReward(DatasetFormReward):
    """:class:`DatasetFormReward` of an ``async`` function: TRL awaits it beside the others."""

    async def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),
                       **kwargs: Any) -> Any:
        with self.calling():
            returned = await self.func(**self.arguments(prompts, completions, kwargs))
        return checked_rewards(self.__name__, returned, completions, prompts)


def is_async(func: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(getattr(func, "__call__", None))


def in_dataset_form(funcs: Sequence[Callable[..., Any]], examples: Sequence[TaskExample],
                    call_marker: Path | None = None) -> list[DatasetFormReward]:
    """``funcs``, each called with the prompts and completions of ``examples``' dataset in its own form (and named
    in ``call_marker`` while it runs)."""
    prompts, conversational = dataset_prompts(examples), is_conversational(examples)
    return [(AsyncDatasetFormReward if is_async(func) else DatasetFormReward)(func, prompts, conversational,
                                                                              call_marker)
            for func in funcs]


def dataset_form_rewards(spec: Any, examples: Sequence[TaskExample], tokenizer: Any,
                         max_completion_length: int, call_marker: Path | None = None) -> list[DatasetFormReward]:
    """A policy's reward functions for TRL (:func:`~mutualrl.tasks.reward_funcs.reward_functions`, the verifier
    bounded by what ``max_completion_length`` tokens of ``tokenizer`` can decode to), in the form of ``examples``'
    dataset."""
    from mutualrl.tasks.reward import max_completion_chars
    from mutualrl.tasks.reward_funcs import reward_functions

    return in_dataset_form(reward_functions(spec, max_chars=max_completion_chars(tokenizer, max_completion_length)),
                           examples, call_marker)

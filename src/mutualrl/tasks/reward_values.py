"""What a reward function returns, checked where it returns it: one finite number or None per completion.

A user's reward function is called by TRL in every worker (training and validation) and by ``mutualrl eval``,
always through :class:`~mutualrl.tasks.reward_form.DatasetFormReward`, which hands what it returned to
:func:`checked_rewards` before anything else reads it. Anything else (a list, a string, a complex number, a
count other than one per completion) was a worker traceback from deep inside TRL or torch, and an infinity (or a
float past float32's range, which the trainer's float32 makes one) trained on ``inf``/``nan`` advantages, filled
``summary.json`` with ``Infinity`` and, in a sharing regime, reached a peer as an SEE shard refused as corrupt,
blaming the peer. Now it is one :class:`~mutualrl.errors.DataError` naming the function, the value's type and the
row it was for. ``None`` is TRL's "this function does not score this completion"; ``NaN`` is refused as well
(return None instead).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from mutualrl.errors import DataError

FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite float32: TRL gathers rewards as float32, where anything larger is ``inf``."""


def checked_rewards(name: str, returned: Any, completions: Sequence[Any], prompts: Sequence[Any] | None) -> Any:
    """``returned`` as it is, once it holds one finite number (or None) per completion; else one line naming the
    function ``name``, what it returned and the prompt and completion of the row."""
    if isinstance(returned, (str, bytes)) or not isinstance(returned, Sequence) and not hasattr(returned, "tolist"):
        raise DataError(f"reward function {name!r} returned a {type(returned).__name__} ({short(returned)}); a reward "
                        "function returns a list with one number (or None) per completion")
    values = returned.tolist() if hasattr(returned, "tolist") else list(returned)
    if len(values) != len(completions):
        raise DataError(f"reward function {name!r} returned {len(values)} rewards for {len(completions)} "
                        "completions (one per completion)")
    for i, value in enumerate(values):
        problem = value_problem(value)
        if problem is not None:
            raise DataError(f"reward function {name!r} returned {problem} for completion {i} "
                            f"({row_text(i, prompts, completions)}); a reward is one finite number, or None where the "
                            "function does not score a completion")
    return returned


def value_problem(value: Any) -> str | None:
    """What is wrong with one reward value (None: a finite number within float32, or None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"a {type(value).__name__} ({short(value)})"
    number = float(value)
    if math.isnan(number):
        return "NaN (return None for a completion the function does not score)"
    if math.isinf(number) or abs(number) > FLOAT32_MAX:
        return f"{number!r}, not finite as the trainer's float32 holds it"
    return None


def row_text(i: int, prompts: Sequence[Any] | None, completions: Sequence[Any]) -> str:
    prompt = short(prompts[i]) if prompts is not None and i < len(prompts) else "?"
    return f"prompt {prompt}, completion {short(completions[i])}"


def short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...'"

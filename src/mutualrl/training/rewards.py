"""The verifier reward handed to TRL: dispatch each row to its task's verifier."""

from __future__ import annotations

from typing import Any

from mutualrl.tasks.registry import get_task


def completion_text(completion: Any) -> str:
    """TRL passes plain strings, or chat messages for conversational prompts."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


def make_reward_function():
    """A TRL reward function ``f(prompts, completions, answer, task, **kw) -> list[float]``."""
    cache: dict[str, Any] = {}

    def verifier_reward(prompts, completions, answer, task, **kwargs) -> list[float]:
        rewards = []
        for completion, gold, name in zip(completions, answer, task, strict=True):
            if name not in cache:
                cache[name] = get_task(name)
            rewards.append(float(cache[name].score(completion_text(completion), str(gold))))
        return rewards

    verifier_reward.__name__ = "verifier"
    return verifier_reward

"""Prompts a built-in pool's models have already seen: the tiny models were warm-started on synthetic-arith's train
split and their skills measured on its test split. A user's task whose prompts are among them measures memory as
much as learning; the launch says so in one line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The built-in models warm-started on synthetic-arith (mutualrl.pools.tiny_warm_start).
WARM_STARTED_ON_SYNTHETIC_ARITH = ("builtin:tiny-bpe", "builtin:tiny-sp")


def seen_prompt_sets(models: Sequence[str]) -> dict[str, set[str]]:
    """What the pool's models saw before training, by what it was: ``{description: {prompt text}}``."""
    if not any(model in WARM_STARTED_ON_SYNTHETIC_ARITH for model in models):
        return {}
    from mutualrl.tasks.synthetic import FAMILY_NAMES, family_split

    def prompts(split: str) -> set[str]:
        return {str(e.prompt).strip() for family in FAMILY_NAMES for e in family_split(family, split)}

    return {"synthetic-arith's train split (the tiny models' warm start)": prompts("train"),
            "synthetic-arith's test split (where their skills were measured)": prompts("test")}


def overlap_warning(models: Sequence[str], train: Sequence[Any], held_out: Sequence[Any]) -> str | None:
    """One line when the task's prompts (``TaskExample``s) are among the prompts the models already saw; None when
    none are."""
    seen = seen_prompt_sets(models)
    if not seen:
        return None
    parts = []
    for name, examples in (("training", train), ("held-out", held_out)):
        texts = [str(e.prompt).strip() for e in examples if isinstance(e.prompt, str)]
        found = {where: sum(text in prompts for text in texts) for where, prompts in seen.items()}
        parts += [f"{count} of your {len(texts)} {name} prompts are in {where}" for where, count in found.items()
                  if count]
    if not parts:
        return None
    return ("; ".join(parts) + ": what training does on them may be memory, not learning; use prompts the pool "
            "has not seen (docs/pools.md, \"The tiny pool\")")

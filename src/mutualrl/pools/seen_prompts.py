"""Prompts a built-in pool's models have already seen: the tiny models were warm-started on synthetic-arith's train
split and their skills measured on its test split. A user's task whose prompts are among them measures memory as
much as learning; the launch says so in one line, and the run's summary.json records the counts
(:func:`seen_prompt_counts`) for ``mutualrl report`` to mark the numbers scored on them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: The built-in models warm-started on synthetic-arith (mutualrl.pools.tiny_warm_start).
WARM_STARTED_ON_SYNTHETIC_ARITH = ("builtin:tiny-bpe", "builtin:tiny-sp")

#: What each seen set is: (its name, what it was to the models, its synthetic-arith split, the launch line's note).
SEEN_SETS = (("synthetic-arith's train split", "warm start", "train", "the tiny models' warm start"),
             ("synthetic-arith's test split", "skill measurement", "test", "where their skills were measured"))
WARM_START = "warm start"


def warm_started(models: Iterable[str]) -> bool:
    """Whether any of ``models`` is a built-in model warm-started on synthetic-arith."""
    return any(model in WARM_STARTED_ON_SYNTHETIC_ARITH for model in models)


def seen_prompt_sets(models: Sequence[str]) -> dict[str, set[str]]:
    """What the pool's models saw before training, by what it was: ``{description: {prompt text}}``."""
    if not warm_started(models):
        return {}
    return {f"{name} ({note})": split_prompts(split) for name, _, split, note in SEEN_SETS}


def split_prompts(split: str) -> set[str]:
    """The prompt texts of one synthetic-arith split, every family."""
    from mutualrl.tasks.synthetic import FAMILY_NAMES, family_split

    return {str(e.prompt).strip() for family in FAMILY_NAMES for e in family_split(family, split)}


def prompt_texts(examples: Sequence[Any]) -> list[str]:
    """The text prompts of ``examples`` (``TaskExample``s), stripped; chat prompts are left out."""
    return [str(e.prompt).strip() for e in examples if isinstance(e.prompt, str)]


def overlap_warning(models: Sequence[str], train: Sequence[Any], held_out: Sequence[Any]) -> str | None:
    """One line when the task's prompts (``TaskExample``s) are among the prompts the models already saw; None when
    none are."""
    seen = seen_prompt_sets(models)
    if not seen:
        return None
    parts = []
    for name, examples in (("training", train), ("held-out", held_out)):
        texts = prompt_texts(examples)
        found = {where: sum(text in prompts for text in texts) for where, prompts in seen.items()}
        parts += [f"{count} of your {len(texts)} {name} prompts are in {where}" for where, count in found.items()
                  if count]
    if not parts:
        return None
    return ("; ".join(parts) + ": what training does on them may be memory, not learning; use prompts the pool "
            "has not seen (docs/pools.md, \"The tiny pool\")")


def seen_prompt_counts(models: Mapping[str, str], train: Sequence[Any],
                       held_out: Sequence[Any]) -> list[dict[str, Any]]:
    """summary.json's ``seen_prompts``: one entry per set of prompts the pool's models saw before training that the
    run's prompts meet, ``{"prompts": "synthetic-arith's train split", "seen_as": "warm start" (or "skill
    measurement"), "policies": [the policies whose model saw them], "training": k, "training_of": n, "held_out":
    k, "held_out_of": n}``; ``[]`` when no policy's model saw any (``models``: ``policy -> model``)."""
    saw = [policy for policy, model in models.items() if model in WARM_STARTED_ON_SYNTHETIC_ARITH]
    if not saw:
        return []
    texts = {"training": prompt_texts(train), "held_out": prompt_texts(held_out)}
    entries = []
    for name, seen_as, split, _ in SEEN_SETS:
        prompts = split_prompts(split)
        counts = {part: sum(text in prompts for text in part_texts) for part, part_texts in texts.items()}
        if any(counts.values()):
            entries.append({"prompts": name, "seen_as": seen_as, "policies": saw,
                            "training": counts["training"], "training_of": len(texts["training"]),
                            "held_out": counts["held_out"], "held_out_of": len(texts["held_out"])})
    return entries

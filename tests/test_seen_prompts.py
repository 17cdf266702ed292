"""A user's dataset whose prompts the tiny models already saw (synthetic-arith, their warm start): one warning line
with the counts."""

from __future__ import annotations

from rich.console import Console

from mutualrl.config.loader import load_run_config
from mutualrl.launch.rundir.prepare import warn_seen_prompts
from mutualrl.pools.seen_prompts import overlap_warning
from mutualrl.tasks.base import TaskExample
from mutualrl.tasks.synthetic import family_split

TINY = ["builtin:tiny-bpe", "builtin:tiny-sp"]


def example(prompt: str) -> TaskExample:
    return TaskExample(prompt_id=prompt, prompt=prompt, answer="0", task="dataset")


def test_the_counts_of_prompts_the_tiny_models_saw() -> None:
    warm = [example(e.prompt) for e in family_split("add", "train")[:5]]
    held = [example(e.prompt) for e in family_split("sub", "test")[:2]]
    fresh = [example("what is 123456 times 2?")]
    line = overlap_warning(TINY, warm + fresh, held + fresh)
    assert line.startswith("5 of your 6 training prompts are in synthetic-arith's train split (the tiny models' "
                           "warm start); 2 of your 3 held-out prompts are in synthetic-arith's test split")
    assert overlap_warning(TINY, fresh, fresh) is None
    assert overlap_warning(["builtin:smollm2-135m"], warm, held) is None  # no warm start of ours to overlap


def test_the_launch_says_it_in_one_line_for_a_user_dataset_only() -> None:
    config = load_run_config("tiny", overrides=["task.name=dataset", "task.source=data"]).config
    console = Console(record=True, width=300)
    warn_seen_prompts(config, [example(e.prompt) for e in family_split("add", "train")[:3]], [], console)
    text = console.export_text()
    assert text.count("\n") == 1 and text.startswith("warning: 3 of your 3 training prompts are in")
    config = load_run_config("tiny").config  # synthetic-arith itself: no warning
    console = Console(record=True)
    warn_seen_prompts(config, [example(e.prompt) for e in family_split("add", "train")[:3]], [], console)
    assert console.export_text() == ""

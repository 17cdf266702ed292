"""`mutualrl eval RUN --limit N` beyond the held-out prompts the run validated on (issue 65): the first N of the
task's held-out split, the run's own first, said in one line; a source that no longer begins with the run's prompts
is refused in one line naming --split; a run that held out its whole split scores it, said so."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from mutualrl.launch.evaluate import run_held_out
from mutualrl.config.loader import load_run_config
from mutualrl.errors import UsageError
from mutualrl.tasks.registry import task_from_config
from mutualrl.training.data import EVAL_FILE, write_examples


def run_folder(tmp_path: Path, overrides: list[str], kept: int, skip: int | None = None) -> SimpleNamespace:
    """A run folder of the tiny pool whose data copy holds the first ``kept`` held-out prompts (less ``skip``, as
    the length filter drops one), as a launch leaves it; what eval's target resolution gives for it."""
    config = load_run_config("tiny", overrides=overrides).config
    rows = task_from_config(config.task).load(config.task.eval_split, config.task.source, kept)
    write_examples(tmp_path / "data" / EVAL_FILE, [row for i, row in enumerate(rows) if i != skip])
    return SimpleNamespace(run_folder=tmp_path, recipe=config)


def said(log: Console) -> list[str]:
    return [line for line in log.file.getvalue().splitlines() if line.strip()]  # type: ignore[attr-defined]


def log_console() -> Console:
    return Console(file=io.StringIO(), width=400)


def test_a_limit_beyond_the_validated_prompts_scores_the_held_out_split_and_says_so(tmp_path: Path) -> None:
    chosen = run_folder(tmp_path, ["validation.limit=5"], 5, skip=2)  # 4 prompts kept of the first 5
    own = run_held_out(chosen, ["synthetic-arith"], split=None, source=None, limit=3, log=log_console())
    assert own is not None and len(own) == 3  # within the run's own: those, as before
    log = log_console()
    rows = run_held_out(chosen, ["synthetic-arith"], split=None, source=None, limit=12, log=log)
    assert rows is not None and len(rows) == 12
    whole = task_from_config(chosen.recipe.task).load("test", None, 12)
    assert [r.prompt for r in rows] == [r.prompt for r in whole]
    assert said(log) == [f"eval: --limit 12 is more than the 4 held-out prompts {tmp_path} validated on "
                         "(validation.limit 5): scoring the first 12 of synthetic-arith's test split, the run's own "
                         "first"]


def test_a_source_that_no_longer_begins_with_the_runs_prompts_is_refused_naming_split(tmp_path: Path) -> None:
    chosen = run_folder(tmp_path, ["validation.limit=5"], 5)
    path = tmp_path / "data" / EVAL_FILE
    path.write_text(path.read_text().replace('"prompt": "', '"prompt": "x', 1))
    with pytest.raises(UsageError, match=r"^--limit 12: .* validated on 5 held-out prompts, and synthetic-arith no "
                       r"longer begins its test split with them .*--split test, or the run's own with --limit 5$"):
        run_held_out(chosen, ["synthetic-arith"], split=None, source=None, limit=12, log=log_console())


def test_a_run_that_held_out_its_whole_split_scores_it_and_says_so(tmp_path: Path) -> None:
    chosen = run_folder(tmp_path, ["validation.limit=null"], 6)  # as if the split had 6 prompts
    log = log_console()
    rows = run_held_out(chosen, ["synthetic-arith"], split=None, source=None, limit=50, log=log)
    assert rows is not None and len(rows) == 6
    assert said(log) == [f"eval: --limit 50: {tmp_path} holds 6 held-out prompts, all of synthetic-arith's test split "
                         "within task.max_prompt_tokens; scoring them"]

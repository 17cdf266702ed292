"""``benchmarks/chaos_user_inputs.py`` without training: its row faults are what the loader refuses (or takes),
and its judge of a refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_helpers import load_benchmark
from mutualrl.errors import DataError
from mutualrl.tasks.registry import get_task

chaos = load_benchmark("chaos_user_inputs")


@pytest.mark.parametrize("fault", sorted(chaos.ROW_FAULTS))
def test_each_row_fault_is_refused_naming_row_5_or_taken(tmp_path: Path, fault: str) -> None:
    bad, needle = chaos.ROW_FAULTS[fault]
    rows = [*chaos.GOOD_ROWS[:5], bad, *chaos.GOOD_ROWS[5:]] if needle else [bad, bad]
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = get_task("dataset")
    if needle is None:
        assert task.load("train", str(source))[0].prompt == "2+2="
        return
    with pytest.raises(DataError, match="row 5") as err:
        task.load("train", str(source))
    assert needle in str(err.value)


def test_a_refusal_is_exit_2_and_one_last_error_line_naming_what_is_asked() -> None:
    said = {"rc": 2, "output": "loading ...\nerror: rows.jsonl: row 5, column 'prompt': empty prompt\n"}
    assert chaos.refused(said, "rows.jsonl", "row 5")
    assert not chaos.refused(said, "row 6")
    assert not chaos.refused({**said, "rc": 1}, "row 5")
    assert not chaos.refused({"rc": 2, "output": "error: x\nTraceback (most recent call last):\n"}, "x")

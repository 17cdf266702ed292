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


@pytest.mark.parametrize("value", sorted(chaos.BAD_VALUES))
def test_each_bad_reward_value_is_refused_naming_the_function(value: str) -> None:
    from mutualrl.tasks.reward_values import checked_rewards

    returned = [eval(chaos.BAD_VALUES[value]), 0.0]  # noqa: S307 - the script's own literals
    with pytest.raises(DataError, match="reward function 'exact' returned"):
        checked_rewards("exact", returned, ["a", "b"], ["p", "q"])


def test_a_forged_record_vouches_for_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trust trial's forgery (config and inputs.json naming an installed module) is refused, unimported."""
    import sys

    from mutualrl.api import load_config
    from mutualrl.config import plugins, recorded_code
    from mutualrl.config.resolved import load_resolved_config, write_resolved_config
    from mutualrl.errors import UsageError
    from mutualrl.run_folder import RunPaths

    for state in ("_DATA_FOLDERS", "_HINT_FOLDERS"):
        monkeypatch.setattr(plugins, state, [])
    monkeypatch.setattr(recorded_code, "_NAMED_BY_COMMAND", set())
    site = tmp_path / "site"
    site.mkdir()
    (site / "g_hostile_fast.py").write_text(f"import pathlib\npathlib.Path({str(tmp_path / 'RAN')!r}).write_text('x')\n")
    monkeypatch.syspath_prepend(str(site))
    paths = RunPaths(tmp_path / "run")
    paths.root.mkdir()
    write_resolved_config(paths, load_config("tiny"), "tiny")
    paths.inputs.write_text(json.dumps({"format": 1, "code": {}, "data": {}}))
    chaos.forge_plugin(paths.root, "g_hostile_fast", site / "g_hostile_fast.py")
    with pytest.raises(UsageError, match="--allow-code g_hostile_fast"):
        load_resolved_config(paths)
    assert not (tmp_path / "RAN").exists() and "g_hostile_fast" not in sys.modules

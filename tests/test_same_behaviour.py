"""benchmarks/same_behaviour.py's comparison of two runs' metrics: a changed value is found, a timing is not."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("same_behaviour", ROOT / "benchmarks" / "same_behaviour.py")
same_behaviour = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(same_behaviour)

ROWS = [
    {"kind": "eval", "policy": "p", "step": 0, "regime": "sgt", "time": 1.0, "eval/reward@1": 0.5,
     "eval/seconds": 0.4},
    {"kind": "train", "policy": "p", "step": 1, "regime": "sgt", "time": 2.0, "loss": 0.25, "reward_mean": 0.5,
     "mutual/build_s": 0.1, "mutual/rollout_seconds": 0.3, "step_time": 1.5, "sgt/rescues": 4.0},
    {"kind": "train", "policy": "q", "step": 1, "regime": "sgt", "time": 2.5, "loss": float("nan"),
     "reward_mean": 0.0},
]


def compare(tmp_path: Path, change: dict) -> dict:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    changed = [dict(ROWS[0]), {**ROWS[1], **change}, dict(ROWS[2])]
    # order in the merged file follows timing: the comparison must not
    b.write_text("".join(json.dumps(row) + "\n" for row in reversed(changed)) + '{"kind": "summary"}\n')
    return same_behaviour.compare_metrics(same_behaviour.read_rows(a), same_behaviour.read_rows(b))


def test_identical_files_compare_equal(tmp_path: Path) -> None:
    result = compare(tmp_path, {})
    assert (result["rows_a"], result["rows_b"], result["train_rows"], result["eval_rows"]) == (3, 3, 2, 1)
    assert result["values"] == 9  # regime, reward, loss, rescues...: identity and timing keys not counted
    assert result["differing_values"] == {} and result["max_abs_delta"] == 0.0  # NaN equals NaN


def test_a_changed_value_is_found_with_its_size(tmp_path: Path) -> None:
    result = compare(tmp_path, {"loss": 0.75, "regime": "prp"})
    assert result["differing_values"] == {"loss": 0.5, "regime": math.inf}
    assert result["max_abs_delta"] == math.inf


def test_only_wall_clock_keys_changed_compares_equal(tmp_path: Path) -> None:
    result = compare(tmp_path, {"time": 9.0, "mutual/build_s": 7.0, "mutual/rollout_seconds": 5.0, "step_time": 3.0})
    assert result["differing_values"] == {} and result["max_abs_delta"] == 0.0
    assert result["ignored_keys"] == ["eval/seconds", "mutual/build_s", "mutual/rollout_seconds", "step_time", "time"]


def test_a_missing_row_is_a_difference(tmp_path: Path) -> None:
    a = tmp_path / "a.jsonl"
    a.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    rows = same_behaviour.read_rows(a)
    result = same_behaviour.compare_metrics(rows, rows[:2])
    assert result["rows_only_a"] == [["train", "q", 1, 0]] and result["max_abs_delta"] == math.inf

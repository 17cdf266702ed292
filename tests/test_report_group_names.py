"""A task group the data names ``all`` is reported apart from the overall reward@1 (issue 68: it wrote over it)."""

from __future__ import annotations

import json
from pathlib import Path

from report_fakes import write_finished_run

from mutualrl.evaluation.report.build import ALL, apart_from_all, build_report


def test_a_task_group_named_all_does_not_replace_the_overall_reward(tmp_path: Path) -> None:
    for seed in (1, 2):
        run = write_finished_run(tmp_path / f"sgt-{seed}", "sgt", seed, {"tiny-bpe": [1, 1, 1, 0]})
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        for row in rows:  # the task group "add" renamed "all", scored 0.0 unlike the overall 0.75
            row[f"eval/group/{ALL}/reward@1"] = row.pop("eval/group/add/reward@1") * 0.0
        (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = build_report([tmp_path / "sgt-1", tmp_path / "sgt-2"])
    by_group = {row.task_group: row.values for row in report.rows}
    assert by_group[ALL] == [0.75, 0.75]
    assert by_group[f"{ALL} (task group)"] == [0.0, 0.0] and by_group["sub"] == [0.5, 0.5]


def test_the_renamed_group_takes_a_name_no_other_group_has() -> None:
    groups = {ALL: 0.1, f"{ALL} (task group)": 0.2, "x": 0.3}
    assert apart_from_all(groups) == {f"{ALL} (task group) (task group)": 0.1, f"{ALL} (task group)": 0.2, "x": 0.3}
    assert apart_from_all({"x": 0.3}) == {"x": 0.3}

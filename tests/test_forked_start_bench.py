"""``benchmarks/forked_start.py``: its rounds and figures with the runs faked, and one real run of it, forked from the
suite's own zygotes (the side-by-side measurement itself is in
benchmarks/results/forked-start.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from zygotes.start import FORK_SERVER_ENV

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "forked_start.py"
spec = importlib.util.spec_from_file_location("forked_start_bench", SCRIPT)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_the_rounds_alternate_and_the_ratios_are_those_of_the_medians(tmp_path, monkeypatch):
    calls = []

    def fake_run(folder: Path, name: str, steps: int, zygotes: Path | None) -> tuple[float, float]:
        calls.append((name, zygotes is not None, steps))
        return (2.0, 4.0) if zygotes else (4.0, 10.0)

    monkeypatch.setattr(bench, "one_run", fake_run)
    monkeypatch.setattr(bench, "wait_for_zygote", lambda z: (z / "starts.log").write_text("forked: zygote k\n" * 6))
    monkeypatch.setattr(sys, "argv", ["forked_start.py", "--rounds", "3", "--steps", "1", "--out",
                                      str(tmp_path / "r.json")])
    bench.main()
    assert [name for name, _, _ in calls] == ["warm-up", "fresh-0", "forked-0", "forked-1", "fresh-1", "fresh-2",
                                              "forked-2"]
    assert all(forked == (not name.startswith("fresh")) and steps == 1 for name, forked, steps in calls)
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["ratio_forked_to_fresh"] == {"wall_s": 0.5, "cpu_s": 0.4} and result["forked_workers"] == 6
    assert bench.machine_cpu_seconds() > 0


@pytest.mark.benchmarks_and_recipes
@pytest.mark.slow
def test_one_run_as_the_script_runs_it(tmp_path, offline_hub):
    wall, cpu = bench.one_run(tmp_path, "r", 1, Path(os.environ[FORK_SERVER_ENV]) if os.environ.get(FORK_SERVER_ENV)
                              else None)
    assert wall > 0 and cpu > 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert {name: policy["steps"] for name, policy in summary["policies"].items()} == {"tiny-bpe": 1, "tiny-sp": 1}

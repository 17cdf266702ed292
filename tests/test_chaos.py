"""Chaos: random kills of the launcher, a worker or everything, then --resume; nothing lost, duplicated or orphaned."""

from __future__ import annotations

import json

import pytest

from bench_helpers import load_benchmark


def load_chaos():
    return load_benchmark("chaos")


def test_row_counter_sees_lost_and_duplicated_rows(tmp_path):
    chaos = load_chaos()
    rows = [{"kind": "train", "policy": "a", "step": s} for s in range(1, chaos.STEPS + 1)]
    rows += [{"kind": "eval", "policy": "a", "step": s} for s in range(0, chaos.STEPS + 1, chaos.VALIDATE_EVERY)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert chaos.count_rows(tmp_path, ["a"]) == {"rows_lost": 0, "rows_duplicated": 0}
    damaged = [r for r in rows if r["step"] != 3] + [rows[0], {"kind": "train", "policy": "a", "step": chaos.STEPS + 1}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in damaged))
    assert chaos.count_rows(tmp_path, ["a"]) == {"rows_lost": 1, "rows_duplicated": 2}


@pytest.mark.slow
def test_every_fault_kind_loses_nothing(tmp_path):
    """Each kind of fault once (two per run, the second one during the resume); the random 30-trial run
    is ``python benchmarks/chaos.py`` (benchmarks/README.md), too long for the suite."""
    chaos = load_chaos()
    summary = chaos.run_trials(trials=0, seed=11, out=tmp_path,
                               schedule=[("launcher", "worker"), ("all", "interrupt")])
    print(f"chaos: {summary['trials']} trials, {summary['faults_injected']} faults {summary['faults_by_kind']}, "
          f"rows lost {summary['rows_lost']}, rows duplicated {summary['rows_duplicated']}, "
          f"orphans {summary['orphans']}, {summary['seconds']}s")
    assert summary["faults_injected"] >= 3, summary["per_trial"]  # a fault is skipped only if its launch ended first
    assert summary["failed_trials"] == [], summary["per_trial"]
    for key in ("rows_lost", "rows_duplicated", "orphans", "models_unloadable", "see_issues"):
        assert summary[key] == 0, (key, summary["per_trial"])

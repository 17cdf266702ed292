"""benchmarks/async_exchange.py: the wait-share arithmetic on hand-made metrics."""

from __future__ import annotations

import json

import pytest

from bench_helpers import load_benchmark

bench = load_benchmark("async_exchange")


def write_rows(run_dir, policy, rows):
    path = run_dir / "metrics" / f"{policy}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"kind": "train", "policy": policy, **r}) + "\n" for r in rows))


def test_wait_profile_skips_the_first_step_and_divides_wait_by_interval(tmp_path):
    # fast: steps 1 s apart, 0.75 s of each spent waiting; slow: 1 s apart, no wait, reads stale rounds.
    write_rows(tmp_path, "tiny-bpe", [{"step": s, "time": float(s), "mutual/wait_s": 9.0 if s == 1 else 0.75}
                                      for s in range(1, 5)])
    write_rows(tmp_path, "tiny-sp", [{"step": s, "time": float(s), "mutual/wait_s": 0.0, "mutual/peer_age": 2}
                                     for s in range(1, 5)])
    profile = bench.wait_profile(tmp_path)
    assert profile["tiny-bpe"]["wait_share"] == pytest.approx(0.75)
    assert profile["tiny-bpe"]["own_s"] == pytest.approx(0.25)
    assert profile["tiny-sp"]["wait_share"] == 0 and profile["tiny-sp"]["peer_age_max"] == 2


def test_weak_group_is_the_lowest_before_training():
    summary = {"policies": {"a": {"groups_before": {"add": 0.9, "sub": 0.1}}, "b": {"groups_before": {"add": 0.0,
                                                                                                       "sub": 0.8}}}}
    assert bench.weak_groups(summary) == {"a": "sub", "b": "add"}


def test_trained_rounds_counts_read_lines_not_skip_lines(tmp_path):
    log = tmp_path / "see" / "_consumed" / "tiny-sp.jsonl"
    log.parent.mkdir(parents=True)
    rows = [{"run_id": "r", "kind": "skip", "step": 0, "until": 0}, {"run_id": "r", "step": 0, "peer_step": 0},
            {"run_id": "r", "kind": "skip", "step": 1, "until": 5}, {"run_id": "r", "step": 5, "peer_step": None}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert bench.trained_rounds(tmp_path, "tiny-sp") == 2

"""Smoke run of benchmarks/see_bandwidth.py at a tiny scale (not timed; checks it runs and reports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.benchmarks_and_recipes
def test_see_bandwidth_benchmark_runs_tiny(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "see_bandwidth.py"), "--prompts", "4", "--rollouts", "2",
         "--min-len", "4", "--max-len", "16", "--policies", "2", "--steps", "1", "--dir", str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1
    row = lines[0]
    assert row["M"] == 2 and row["rows_per_policy"] == 8 and row["len_range"] == [4, 16]
    assert 8 * 4 <= row["tokens_per_policy"] <= 8 * 16
    assert row["bytes_per_policy"] > 0
    assert row["see_s_per_step"] > 0 and row["raw_s"] > 0 and row["fraction_of_raw"] > 0
    assert list(tmp_path.iterdir()) == []  # the benchmark cleans up after itself

"""`mutualrl train --dry-run` prints the plan and writes nothing: not into a finished run, not a new folder."""

from __future__ import annotations

import pytest

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from e2e_helpers import child_env


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def dry_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mutualrl", "train", "--dry-run", *args], env=child_env(),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # over 5 s on the 2-core box: the full suite, not the fast tier
def test_dry_run_into_a_finished_run_changes_nothing(tmp_path):
    run = tmp_path / "run"
    (run / "launch").mkdir(parents=True)
    (run / "launch" / "plan.json").write_text('{"regime": "sgt", "recorded": true}')
    (run / "launch" / "tiny-bpe.grpo.json").write_text('{"learning_rate": 0.0003}')
    (run / "config.yaml").write_text("regime: {name: sgt}\n")
    (run / "run.json").write_text('{"status": "done"}')
    before = tree_digest(run)
    done = dry_run("--regime", "xgrpo", "--set", "grpo.learning_rate=0.01", "-o", str(run))
    assert done.returncode == 0, done.stderr
    assert "xgrpo" in done.stdout  # the plan was printed
    assert tree_digest(run) == before
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "launch", "run.json"]


@pytest.mark.slow  # over 5 s on the 2-core box: the full suite, not the fast tier
def test_dry_run_creates_no_folder_and_save_plan_writes_only_its_file(tmp_path):
    run, saved = tmp_path / "new-run", tmp_path / "plans" / "plan.json"
    done = dry_run("--baseline", "standalone", "-o", str(run), "--save-plan", str(saved))
    assert done.returncode == 0, done.stderr
    assert not run.exists() and not Path(f"{run}-standalone").exists()
    plan = json.loads(saved.read_text())
    assert [p["name"] for p in plan["policies"]] == ["tiny-bpe", "tiny-sp"]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["plan.json", "plans"]


def test_save_plan_needs_dry_run(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mutualrl", "train", "-o", str(tmp_path / "r"), "--save-plan",
                           str(tmp_path / "p.json")], env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "--save-plan" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []

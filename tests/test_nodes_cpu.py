"""Two machines simulated on this one: two `mutualrl train --nodes 2 --machine-rank 0|1` launchers, one run folder.

With 2 machines and the 2-policy tiny pool, each machine runs one policy; the launchers meet through the
run folder (RUN/.machines), the policies exchange through the shared SEE, machine 0 writes the summary.
With 4 machines each policy is one torchrun group of 2 ranks spanning two machines (--nnodes 2).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from e2e_helpers import child_env, free_ports
from mutualrl.ops.exchange_inspect import inspect_exchange

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)

STEPS = 2


def launcher(run_dir, machine: int, nodes: int = 2, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "mutualrl", "train", "--pool", "tiny", "--regime", "sgt", "--max-steps", str(STEPS),
            "--nodes", str(nodes), "--machine-rank", str(machine), "--main-address", "127.0.0.1", "-o", str(run_dir),
            "--set", "validation.limit=4", "--set", "validation.at_start=false",  # validation: not what is tested
            "--set", "launch.threads_per_policy=1", *extra]
    return subprocess.Popen(argv, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_two_launchers_on_two_simulated_machines_train_one_run(tmp_path):
    # A run over machines keeps its recipe's ports, so not the default another test's run may hold; machine 1 first.
    run_dir, port = tmp_path / "run", free_ports(2)
    machines = [launcher(run_dir, k, 2, "--set", f"launch.main_process_port={port}") for k in (1, 0)]
    outputs = [proc.communicate(timeout=300)[0] for proc in machines]
    for proc, out in zip(machines, outputs, strict=True):
        assert proc.returncode == 0, out[-4000:]
    machine1, machine0 = outputs
    assert "runs tiny-sp" in machine1 and "machine 0 writes the run's summary" in machine1
    assert "machine(s) 1 (" in machine0 and "joined" in machine0
    report = inspect_exchange(run_dir)
    assert report.ok, report.issues
    assert sorted(report.cells) == list(range(STEPS)) and all(set(row) == {"tiny-bpe", "tiny-sp"}
                                                              for row in report.cells.values())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trained = sorted((r["policy"], r["step"]) for r in rows if r["kind"] == "train")
    assert trained == [(p, s) for p in ("tiny-bpe", "tiny-sp") for s in range(1, STEPS + 1)]
    assert all("sgt/rescues" in r for r in rows if r["kind"] == "train")  # peers' successes were read
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {name: p["steps"] for name, p in summary["policies"].items()} == {"tiny-bpe": STEPS, "tiny-sp": STEPS}
    assert json.loads((run_dir / "run.json").read_text())["status"] == "done"
    done = [json.loads((run_dir / ".machines" / f"done-{k}.json").read_text()) for k in (0, 1)]
    assert [d["returncodes"] for d in done] == [{"tiny-bpe": 0}, {"tiny-sp": 0}]
    assert done[0]["session"] == done[1]["session"]


@pytest.mark.slow
def test_each_policy_spanning_two_simulated_machines(tmp_path):
    """4 machines, 2 policies: each policy is one 2-rank torchrun group over two machines, meeting at its first."""
    run_dir, port = tmp_path / "run", free_ports(2)
    machines = [launcher(run_dir, k, 4, "--set", f"launch.main_process_port={port}") for k in (3, 2, 1, 0)]
    outputs = [proc.communicate(timeout=300)[0] for proc in machines]
    for proc, out in zip(machines, outputs, strict=True):
        assert proc.returncode == 0, out[-4000:]
    report = inspect_exchange(run_dir)
    assert report.ok, report.issues
    assert all(cell.world_size == 2 and cell.ranks == [0, 1] for row in report.cells.values() for cell in row.values())
    for policy, second in (("tiny-bpe", 1), ("tiny-sp", 3)):
        for log in (f"{policy}.log", f"{policy}.machine-{second}.log"):
            assert "MULTI_CPU on cpu:0 x2" in (run_dir / "logs" / log).read_text()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sorted((r["policy"], r["step"]) for r in rows if r["kind"] == "train") == [
        (p, s) for p in ("tiny-bpe", "tiny-sp") for s in range(1, STEPS + 1)]

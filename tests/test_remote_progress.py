"""Two machines: a policy waiting at the barrier for a peer on the other machine that still gets on (a long
validation) is not stalled; a pool that gets on nowhere still is."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from pool_fakes import sleeper

from mutualrl.launch.supervise.nodes import RemoteWatch, write_done
from mutualrl.launch.supervise.runner import PolicyProcess, PoolRunner, PoolSettings
from mutualrl.run_folder import RunPaths

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)

SESSION = {"session": "s-1"}


def _runner(tmp_path: Path, proc: PolicyProcess, stall_s: float) -> PoolRunner:
    remote = RemoteWatch(tmp_path, tmp_path / "see", SESSION, 0, {"a": (0,), "b": (1,)}, wait_for=[1],
                         peer_timeout_s=None)
    settings = PoolSettings(tmp_path / "see", stall_timeout_s=stall_s, grace_s=5.0, poll_s=0.05)
    return PoolRunner([proc], RunPaths(tmp_path), settings, console=Console(file=io.StringIO()), remote=remote)


def _machine_1(tmp_path: Path, phases: int, every_s: float) -> threading.Thread:
    """Machine 1 seen through the shared run folder: policy b validates (its status phase moves), then its
    launcher reports that its workers finished."""
    status = tmp_path / "status"
    status.mkdir(parents=True, exist_ok=True)

    def validate() -> None:
        for done in range(phases):
            tmp = status / ".b.tmp"
            tmp.write_text(json.dumps({"policy": "b", "step": 0, "phase": f"validating {done}/{phases} (step 0)"}))
            os.replace(tmp, status / "b.json")
            time.sleep(every_s)
        write_done(tmp_path, 1, SESSION, True, returncodes={"b": 0})

    thread = threading.Thread(target=validate, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_a_policy_waiting_for_a_validating_peer_on_the_other_machine_is_not_stalled(tmp_path):
    """Failed before: the runner counted only this machine's processes as progress, so ``a`` was killed as
    stalled after the stall limit while ``b`` (machine 1) still validated."""
    machine_1 = _machine_1(tmp_path, phases=10, every_s=0.4)  # 4 s of validation against a 1.5 s stall limit
    outcome = _runner(tmp_path, sleeper(tmp_path, "a", 4.5), stall_s=1.5).run()
    machine_1.join()
    assert outcome.ok, outcome.reason
    assert outcome.returncodes == {"a": 0}


def test_a_pool_that_gets_on_on_no_machine_is_still_stalled(tmp_path):
    status = tmp_path / "status"
    status.mkdir(parents=True)
    (status / "b.json").write_text(json.dumps({"policy": "b", "step": 3, "phase": "training"}))  # never moves
    started = time.monotonic()
    outcome = _runner(tmp_path, sleeper(tmp_path, "a", 60), stall_s=1.5).run()
    assert not outcome.ok and outcome.failed_policy == "a" and "stalled" in outcome.reason
    assert time.monotonic() - started < 30

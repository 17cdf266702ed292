"""User code that ends a process (issue 50, items 6-8): how a run ends when a reward function exits, forks or is
interrupted, and what the next launch is told."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mutualrl
from mutualrl.errors import MutualRLError

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)


def test_ctrl_c_during_the_python_api_raises_keyboard_interrupt(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner turns Ctrl-C into an "interrupted" outcome (workers stopped, run resumable); ``mutualrl.train``
    raises ``KeyboardInterrupt`` for it, so a sweep's ``except MutualRLError`` does not go on to the next run."""
    from mutualrl.launch.supervise import runner

    def ctrl_c_while_starting(self: runner.PoolRunner) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.PoolRunner, "start", ctrl_c_while_starting)
    with pytest.raises(KeyboardInterrupt, match="resumable") as caught:
        mutualrl.train("tiny", output_dir=tmp_path / "run", max_steps=1, progress=False)
    assert not isinstance(caught.value, MutualRLError)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "interrupted"


# -- item 7: the run lock is the launcher's and its workers', never a forked process's ------------------------------

FORKS_AND_EXITS = '''
import json, os, subprocess, sys
from pathlib import Path
run, name = Path(sys.argv[1]), sys.argv[2]
(run / "status").mkdir(parents=True, exist_ok=True)
(run / "status" / f"{name}.json").write_text(json.dumps({"policy": name, "step": 1, "max_steps": 1}))
# what a reward function may do: a process that outlives it, given every descriptor it may inherit
stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], close_fds=False,
                         start_new_session=True)
(run / f"stray-{name}").write_text(str(stray.pid))
'''


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_a_process_a_worker_leaves_behind_does_not_keep_the_run_locked(tmp_path: Path) -> None:
    """Through the pool loop: a worker starts a long process (as a reward function may) and exits; once the
    launcher let go, the next launch takes the folder at once instead of calling the run live."""
    from types import SimpleNamespace

    from rich.console import Console

    from mutualrl.api import load_config
    from mutualrl.launch.rundir.lock import RunLock
    from mutualrl.launch.supervise.machine_workers import run_machine_workers
    from mutualrl.run_folder import RunPaths

    script = tmp_path / "worker.py"
    script.write_text(FORKS_AND_EXITS)
    paths = RunPaths(tmp_path / "run")
    config = load_config("tiny", regime="standalone", max_steps=1)
    specs = [SimpleNamespace(policy=p.name, argv=[sys.executable, str(script), str(paths.root), p.name], env={},
                             log_path=str(paths.log(p.name)), cwd=None) for p in config.pool.policies]
    try:
        with RunLock(paths.root).acquire("train into") as lock:
            plan = SimpleNamespace(specs=specs, policy=lambda name: SimpleNamespace(grpo={"use_vllm": False}))
            outcome = run_machine_workers(config, plan, paths, None, lock,
                                          Console(file=io.StringIO()))
        strays = [int((paths.root / f"stray-{spec.policy}").read_text()) for spec in specs]
        assert outcome.returncodes == {spec.policy: 0 for spec in specs}
        with RunLock(paths.root).acquire("resume", wait_for_orphans_s=1) as again:
            assert json.loads(again.path.read_text())["pid"] == os.getpid()
    finally:
        for path in paths.root.glob("stray-*"):
            _kill(int(path.read_text()))
    assert all(s > 0 for s in strays)


DIES_HOLDING = '''
import os, subprocess, sys, time
from mutualrl.launch.rundir.lock import RunLock
lock = RunLock(sys.argv[1]).acquire("train into")
fork = os.fork()
if fork == 0:  # a fork without exec (multiprocessing's default): it shares the locked file
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    time.sleep(60)
    os._exit(0)
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                          stdout=subprocess.DEVNULL)
if len(sys.argv) > 3:
    lock.add_worker("a", worker.pid)
with open(sys.argv[2], "w") as fh:
    fh.write(f"{worker.pid} {fork}")
os._exit(0)  # killed: no release
'''


def _launcher_that_dies(tmp_path: Path, record_worker: bool) -> tuple[int, int]:
    """A launcher that took the lock, forked, started a worker (recorded or not) and died: (worker, fork) pids."""

    script = tmp_path / "launcher.py"
    script.write_text(DIES_HOLDING)
    pids, log = tmp_path / "pids", tmp_path / "launcher.log"
    with log.open("w") as out:  # not a pipe: the processes it leaves behind would keep it open
        code = subprocess.call([sys.executable, str(script), str(tmp_path / "run"), str(pids),
                                *(["worker"] if record_worker else [])], stdout=out, stderr=out, timeout=60,
                               env={**os.environ, "PYTHONPATH": str(Path(mutualrl.__file__).parents[1])})
    assert code == 0, log.read_text()
    worker, fork = map(int, pids.read_text().split())
    return worker, fork


def test_a_lock_whose_launcher_died_is_taken_over_though_a_fork_still_holds_the_file(tmp_path: Path) -> None:
    """The recorded holder is dead (checked) and none of its recorded workers lives: the lock is taken, whatever
    stray process still holds the old file; no message about a pid nobody checked."""
    from mutualrl.launch.rundir.lock import RunLock

    worker, fork = _launcher_that_dies(tmp_path, record_worker=False)
    try:
        with RunLock(tmp_path / "run").acquire("resume", wait_for_orphans_s=1) as lock:
            assert json.loads(lock.path.read_text())["pid"] == os.getpid()
    finally:
        _kill(worker)
        _kill(fork)


def test_a_recorded_worker_still_alive_keeps_the_folder_busy_and_is_named_by_its_checked_pid(tmp_path: Path) -> None:
    from mutualrl.launch.rundir.lock import RunBusyError, RunLock, pid_alive

    worker, fork = _launcher_that_dies(tmp_path, record_worker=True)
    _kill(fork)
    try:
        with pytest.raises(RunBusyError, match=rf"policy a's worker \(pid {worker}\) still runs") as busy:
            RunLock(tmp_path / "run").acquire("resume", wait_for_orphans_s=1)
        assert "kill that pid" not in str(busy.value)
    finally:
        _kill(worker)

    deadline = time.monotonic() + 10
    while pid_alive(worker):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    with RunLock(tmp_path / "run").acquire("resume", wait_for_orphans_s=1):
        pass


# -- item 6: a run is done only when every policy trained all its steps --------------------------------------------

ENDS_EARLY = '''
import json, os, sys
from pathlib import Path
run, name, last = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
(run / "status").mkdir(parents=True, exist_ok=True)
for step in range(1, last + 1):
    (run / "status" / f"{name}.json").write_text(json.dumps({"policy": name, "step": step, "max_steps": 4}))
os._exit(0)  # what os._exit(0) in a reward function does to the worker
'''


@pytest.mark.parametrize("last", [4, 1, 0])
def test_a_worker_that_exits_0_before_its_last_step_fails_the_run_naming_it(tmp_path: Path, last: int) -> None:
    from rich.console import Console

    from mutualrl.launch.supervise.runner import PolicyProcess, PoolRunner, PoolSettings
    from mutualrl.run_folder import RunPaths

    script = tmp_path / "worker.py"
    script.write_text(ENDS_EARLY)
    paths = RunPaths(tmp_path / "run")
    if last < 4:  # a status left by an earlier, finished run of the folder counts for nothing
        paths.status_dir.mkdir(parents=True)
        paths.status("b").write_text(json.dumps({"policy": "b", "step": 4, "max_steps": 4}))
    procs = [PolicyProcess(name=name, argv=[sys.executable, str(script), str(paths.root), name, str(steps)], env={},
                           log_path=paths.log(name)) for name, steps in (("a", 4), ("b", last))]
    settings = PoolSettings(paths.see_root(), stall_timeout_s=60.0, grace_s=5.0, poll_s=0.05, max_steps=4)
    outcome = PoolRunner(procs, paths, settings, console=Console(file=io.StringIO())).run()
    if last == 4:
        assert outcome.ok
        return
    assert not outcome.ok and outcome.failed_policy == "b"
    assert f"exited with code 0 at step {last} of 4 without finishing its training" in outcome.reason


ENDS_IN_A_REWARD = '''
import json, os, sys
from pathlib import Path
from mutualrl.run_folder import RunPaths
from mutualrl.tasks.reward_form import DatasetFormReward
paths, name = RunPaths(Path(sys.argv[1])), sys.argv[2]
paths.status_dir.mkdir(parents=True, exist_ok=True)
paths.status(name).write_text(json.dumps({"policy": name, "step": 1, "max_steps": 4}))
def fine(completions, **kwargs):
    return [1.0] * len(completions)
def leaves(completions, **kwargs):
    os._exit(0)
DatasetFormReward(fine, {}, False, paths.reward_call(name))(["p"], ["c"])  # a call that returns leaves no name
DatasetFormReward(leaves, {}, False, paths.reward_call(name))(["p"], ["c"])
'''


def test_a_worker_ended_inside_a_reward_function_is_reported_naming_the_function(tmp_path: Path) -> None:
    from rich.console import Console

    from mutualrl.launch.supervise.runner import PolicyProcess, PoolRunner, PoolSettings
    from mutualrl.run_folder import RunPaths

    script = tmp_path / "worker.py"
    script.write_text(ENDS_IN_A_REWARD)
    paths = RunPaths(tmp_path / "run")
    procs = [PolicyProcess(name="b", argv=[sys.executable, str(script), str(paths.root), "b"], env={},
                           log_path=paths.log("b"))]
    settings = PoolSettings(paths.see_root(), stall_timeout_s=60.0, grace_s=5.0, poll_s=0.05, max_steps=4)
    outcome = PoolRunner(procs, paths, settings, console=Console(file=io.StringIO())).run()
    assert not outcome.ok and outcome.failed_policy == "b"
    assert "at step 1 of 4 without finishing its training" in outcome.reason
    assert outcome.reason.endswith("(in reward function 'leaves')")


def test_a_released_lock_keeps_no_record_so_a_launch_that_changed_nothing_leaves_the_folder_as_it_was(tmp_path: Path):
    """A --resume of a finished run takes the lock and trains nothing: the folder must be byte for byte the same."""
    from mutualrl.launch.rundir.lock import RunLock

    with RunLock(tmp_path / "run").acquire("resume") as lock:
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()  # held: the holder says who it is
    assert lock.path.read_bytes() == b""
    with RunLock(tmp_path / "run").acquire("resume"):  # an empty record is a free lock
        pass

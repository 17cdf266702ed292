"""Ctrl-C stops a pool of any size within seconds, even workers that ignore SIGTERM, even while it starts."""

from __future__ import annotations

import io
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from fake_policies import FAKE_POLICY, StoppedAtStep
from mutualrl.launch.supervise.runner import PolicyProcess, PoolRunner, PoolSettings
from mutualrl.launch.supervise.signals import interrupt_requested, raise_if_interrupted, stop_signals
from mutualrl.run_folder import RunPaths

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)

# A worker busy where SIGTERM does not reach it (as one importing torch can be): only SIGKILL stops it.
STUBBORN = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(300)\n"


class InterruptedRunner(PoolRunner):
    """Raises KeyboardInterrupt (what Ctrl-C does) once: after ``after_spawns`` starts, or in the first loop."""

    def __init__(self, *args, after_spawns: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.after_spawns, self.spawned, self.interrupted = after_spawns, 0, False

    def _spawn(self, proc):
        super()._spawn(proc)
        self.spawned += 1
        if self.after_spawns is not None and self.spawned == self.after_spawns:
            self.interrupted = True
            raise KeyboardInterrupt

    def _merge(self):
        if self.after_spawns is None and not self.interrupted:
            self.interrupted = True
            time.sleep(1.0)  # every worker is up and ignoring SIGTERM
            raise KeyboardInterrupt
        return super()._merge()


def stubborn_pool(tmp_path: Path, size: int) -> list[PolicyProcess]:
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    return [PolicyProcess(name=f"p{i}", argv=[sys.executable, str(script)], env={},
                          log_path=tmp_path / "logs" / f"p{i}.log") for i in range(size)]


def runner(tmp_path: Path, procs, **kwargs) -> InterruptedRunner:
    settings = PoolSettings(tmp_path / "see", stall_timeout_s=60.0, grace_s=20.0, poll_s=0.05)
    return InterruptedRunner(procs, RunPaths(tmp_path), settings, console=Console(file=io.StringIO()),
                             **kwargs)


@pytest.mark.slow  # over 5 s on the 2-core box: the full suite, not the fast tier
def test_ctrl_c_kills_a_large_pool_that_ignores_sigterm(tmp_path):
    procs = stubborn_pool(tmp_path, 12)
    started = time.time()
    outcome = runner(tmp_path, procs).run()
    assert outcome.reason == "interrupted" and not outcome.ok
    assert time.time() - started < 25  # 1 s up + 10 s grace + the kill: seconds, not the workers' 300 s
    assert all(p.popen.poll() is not None for p in procs)


@pytest.mark.slow  # the interrupt's 10 s grace for workers that ignore SIGTERM: not the fast tier
def test_ctrl_c_while_the_pool_is_still_starting_stops_those_started(tmp_path):
    procs = stubborn_pool(tmp_path, 8)
    outcome = runner(tmp_path, procs, after_spawns=5).run()
    assert outcome.reason == "interrupted"
    started = [p for p in procs if p.popen is not None]
    assert len(started) == 5 and all(p.popen.poll() is not None for p in started)


class DropsAKeyboardInterrupt:
    """Receives SIGINT inside its finalizer, where Python prints "Exception ignored" and drops the
    KeyboardInterrupt (as it did inside the regex module's ``__del__`` while a tokenizer loaded)."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs at the next bytecode boundary, still inside __del__
            pass


@pytest.fixture
def sigint_restored():
    """Put back the SIGINT handler pytest was started with, whatever a test set."""
    before = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_ctrl_c_python_drops_in_a_finalizer_still_stops_the_pool(tmp_path, monkeypatch, sigint_restored):
    procs = [PolicyProcess(name=f"p{i}", argv=[sys.executable, "-c", "pass"], env={},
                           log_path=tmp_path / "logs" / f"p{i}.log") for i in range(2)]  # would finish "ok"
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: dropped.append(info.exc_type))
    # A Ctrl-C reaches this process whatever started pytest (a script's `cmd &` starts it with SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with stop_signals():
        DropsAKeyboardInterrupt()  # collected at once: the interrupt is raised and dropped in __del__
        assert dropped == [KeyboardInterrupt]  # Python dropped it: nothing was raised here
        assert interrupt_requested() == "SIGINT"
        settings = PoolSettings(tmp_path / "see", stall_timeout_s=60.0, grace_s=5.0, poll_s=0.05)
        outcome = PoolRunner(procs, RunPaths(tmp_path), settings, console=Console(file=io.StringIO())).run()
    assert outcome.reason == "interrupted" and not outcome.ok
    assert all(p.popen is None for p in procs)  # stopped before a worker started
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored after


def test_without_a_stop_signal_the_check_does_nothing_and_nested_blocks_keep_a_request():
    with stop_signals():
        raise_if_interrupted()  # nothing requested: no exception
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
        with stop_signals():  # an inner block (a run of a pair) does not forget the outer request
            with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
                raise_if_interrupted()
    assert interrupt_requested() is None  # forgotten when the outermost block ended
    raise_if_interrupted()  # so a pool run afterwards, outside any block, is not stopped by it


def test_a_signal_ignored_on_entry_stays_ignored_as_under_nohup():
    """`nohup mutualrl train &` ignores SIGHUP so that closing the terminal does not stop the run."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with stop_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN  # the others are still caught
            os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(1000):  # a handler would run at the next bytecode boundary
                pass
            raise_if_interrupted()  # nothing was requested
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


# -- a stop that saves: every policy checkpoints at one step (training/stop_request.py) --------------------------


def test_the_stop_step_is_the_furthest_step_in_flight_and_none_before_a_step_completed():
    from mutualrl.training.stop_request import HOLDING, stop_step

    assert stop_step({"a": {"step": 3, "phase": "training"}, "b": {"step": 2}}) == 4  # a's step 4 is in flight
    assert stop_step({"a": {"step": 3, "phase": HOLDING}, "b": {"step": 2}}) == 3  # a holds at its step end
    assert stop_step({"a": {"step": 3, "phase": HOLDING}, "b": {"step": 3, "phase": HOLDING}}) == 3
    assert stop_step({"a": {}, "b": {"step": 0, "phase": "training"}}) == 0  # nothing trained: stop at once
    assert stop_step({"a": {"step": "x"}, "b": {"step": 1}}) == 2  # a damaged status counts as step 0
    # a finished policy saved already: the others stop at their own step; none past its last step
    assert stop_step({"a": {"step": 5, "phase": "finished", "max_steps": 5}, "b": {"step": 3, "max_steps": 5}}) == 4
    assert stop_step({"a": {"step": 5, "phase": "validating", "max_steps": 5}, "b": {"step": 4, "max_steps": 5}}) == 5


def test_the_request_is_on_disk_before_the_statuses_are_read(tmp_path):
    """A policy not counted with its step in flight must see the request at its next step end (and hold there)."""
    from mutualrl.training.stop_request import read_request, request_stop

    paths = RunPaths(tmp_path)
    seen = []
    step = request_stop(paths, "SIGTERM", lambda: seen.append(read_request(paths)) or {"a": {"step": 5}})
    assert seen == [{"signal": "SIGTERM"}] and step == 6
    assert read_request(paths) == {"signal": "SIGTERM", "step": 6}


def test_a_stop_has_every_policy_save_at_one_step_the_slower_catching_up(tmp_path):
    script = tmp_path / "fake_policy.py"
    script.write_text(FAKE_POLICY)
    procs = [PolicyProcess(name=name, argv=[sys.executable, str(script), str(tmp_path), name, pace], env={},
                           log_path=tmp_path / "logs" / f"{name}.log") for name, pace in (("a", "0.02"), ("b", "0.1"))]
    settings = PoolSettings(tmp_path / "see", stall_timeout_s=60.0, grace_s=20.0, poll_s=0.05)
    outcome = StoppedAtStep(procs, RunPaths(tmp_path), settings, at=2,
                            console=Console(file=io.StringIO())).run()
    assert outcome.reason == "interrupted" and outcome.returncodes == {"a": 75, "b": 75}
    saved = {(tmp_path / f"{name}.saved").read_text() for name in ("a", "b")}
    assert len(saved) == 1 and int(saved.pop()) >= 2  # one step for both, though a ran ahead of b


SIGNALLED_WORKER = """
import os, sys, time
from pathlib import Path
from mutualrl.run_folder import RunPaths
from mutualrl.training import stop_request

stop_request.LAUNCHER_WAIT_S = 0.5
stop_request.install_stop_handlers(RunPaths(Path(sys.argv[1])))
print("up", flush=True)
time.sleep(1.5)
print("went on", flush=True)
"""


@pytest.mark.parametrize("request_on_disk, goes_on, sent", [
    ({"signal": "SIGTERM", "step": 3}, True, signal.SIGTERM), (None, False, signal.SIGTERM),
    ({"signal": "teardown", "step": 0}, False, signal.SIGTERM),
    ({"signal": "SIGUSR2", "step": 3}, True, signal.SIGUSR2), (None, False, signal.SIGUSR2)])
def test_a_signalled_worker_goes_on_to_the_launchers_step_or_ends_as_before(tmp_path, request_on_disk, goes_on, sent):
    """Slurm's scancel (SIGTERM) and submitit's warning before the time limit (SIGUSR2) signal the workers too: one
    goes on when its launcher asks for a step, and otherwise (no request within the wait, or a teardown) the signal
    ends it as it did before."""
    import json
    import subprocess

    from mutualrl.training.stop_request import stop_path
    from mutualrl.ops.watchdog import LAUNCHER_PID_ENV

    paths = RunPaths(tmp_path)
    if request_on_disk is not None:
        stop_path(paths).parent.mkdir(parents=True)
        stop_path(paths).write_text(json.dumps(request_on_disk))
    worker = subprocess.Popen([sys.executable, "-c", SIGNALLED_WORKER, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, LAUNCHER_PID_ENV: str(os.getpid())})
    assert worker.stdout.readline().strip() == "up"
    worker.send_signal(sent)
    out, _ = worker.communicate(timeout=30)
    assert (worker.returncode, "went on" in out) == ((0, True) if goes_on else (-sent, False))


class SecondStop(StoppedAtStep):
    """A second stop signal while the policies go on to their step: the first wait for them is cut short."""

    def _reap(self, timeout_s):
        if self.interrupted and timeout_s > 5:
            raise KeyboardInterrupt
        super()._reap(timeout_s)


def test_a_second_stop_signal_kills_the_pool_at_once(tmp_path):
    script = tmp_path / "fake_policy.py"
    script.write_text(FAKE_POLICY.replace("time.sleep(pace)", "time.sleep(pace if step == 0 else 300)"))
    procs = [PolicyProcess(name=name, argv=[sys.executable, str(script), str(tmp_path), name, "0.01"], env={},
                           log_path=tmp_path / "logs" / f"{name}.log") for name in ("a", "b")]
    settings = PoolSettings(tmp_path / "see", stall_timeout_s=60.0, grace_s=20.0, poll_s=0.05)
    started = time.time()
    outcome = SecondStop(procs, RunPaths(tmp_path), settings, at=1, console=Console(file=io.StringIO())).run()
    assert outcome.reason == "interrupted" and outcome.returncodes == {"a": -signal.SIGKILL, "b": -signal.SIGKILL}
    assert time.time() - started < 15  # not the 300 s step, nor the 20 s grace


def test_the_same_stop_delivered_twice_counts_once_and_a_later_one_stops_at_once(monkeypatch):
    from mutualrl.launch.supervise import signals

    clock = [100.0]
    monkeypatch.setattr(signals.time, "monotonic", lambda: clock[0])
    monkeypatch.setitem(signals._state, "requested", None)
    with pytest.raises(KeyboardInterrupt):
        signals._interrupt(signal.SIGINT, None)
    clock[0] += 0.2
    signals._interrupt(signal.SIGTERM, None)  # a sweep passing the same Ctrl-C on: no second stop
    clock[0] += 2.0
    with pytest.raises(KeyboardInterrupt):
        signals._interrupt(signal.SIGTERM, None)
    monkeypatch.setitem(signals._state, "requested", None)


def test_submitits_warning_before_a_slurm_time_limit_stops_the_launcher_as_sigterm_does():
    """submitit's sbatch script asks for SIGUSR2 90 s before the limit, to every process of the task: its default
    action would end the launcher with nothing saved."""
    import time

    before = signal.getsignal(signal.SIGUSR2)
    if before is signal.SIG_IGN:  # a stop_signals block keeps an ignored signal ignored (nohup's way)
        signal.signal(signal.SIGUSR2, before := signal.SIG_DFL)
    with stop_signals():
        with pytest.raises(KeyboardInterrupt, match="SIGUSR2"):
            os.kill(os.getpid(), signal.SIGUSR2)
            for _ in range(1000):
                time.sleep(0)
    assert signal.getsignal(signal.SIGUSR2) is before  # restored after

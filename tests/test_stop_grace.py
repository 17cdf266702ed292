"""A stop that saves waits as long as the run needs (launch/supervise/stop_grace.py): the steps to go as the launcher
measured them plus the plan's checkpoint writes, at least 20 s; a Slurm job asks for its warning that long before
its time limit."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from mutualrl import fault_injection
from fake_policies import FAKE_POLICY, StoppedAtStep
from mutualrl.launch.supervise.runner import PolicyProcess, PoolSettings
from mutualrl.launch.supervise.stop_grace import StepTimes, StopBudget, planned_save_gib, stop_grace_s, warning_s
from mutualrl.launch.sweep.slurm import SlurmOptions, stop_signal
from mutualrl.run_folder import RunPaths

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)


def test_the_grace_is_the_steps_to_go_and_the_checkpoint_writes_at_least_the_floor():
    assert stop_grace_s(0.0, 0.0) == 20.0  # nothing measured, nothing planned: the floor, as before
    assert stop_grace_s(4.0, 0.5) == 20.0  # 1.5 x 4 + 0.5 / 0.25 = 8 s: under the floor
    assert stop_grace_s(40.0, 52.0) == 268.0  # 1.5 x 40 s + 52 GiB (a 4B policy under ZeRO-3) at 0.25 GiB/s
    assert stop_grace_s(2.0, 0.04, floor_s=1.0, write_gib_per_s=0.004) == pytest.approx(13.0)  # a test's: 3 + 10
    # a Slurm warning, no step measured: 1.5 x 600 s + the checkpoints, at most half the job's time
    assert warning_s(52.0, 240) == 1108
    assert warning_s(42.25, 2880) == 1069  # the 2qwen pool's two checkpoints (20.08 + 22.17 GiB)
    assert warning_s(52.0, 30) == 900 and warning_s(0.0, 1) == 30


def test_the_plans_checkpoints_are_summed_over_the_pool_and_none_without_a_disk_table():
    disk = SimpleNamespace(policies=[SimpleNamespace(checkpoint_gib=20.08), SimpleNamespace(checkpoint_gib=22.17)])
    assert planned_save_gib(SimpleNamespace(disk=disk)) == pytest.approx(42.25)
    assert planned_save_gib(SimpleNamespace(disk=None)) == 0.0 and planned_save_gib(None) == 0.0
    budget = StopBudget(save_gib=42.25)
    assert budget.grace_s(10.0) == pytest.approx(15.0 + 169.0)
    assert budget.describe(10.0) == ("waiting up to 184 s: 1.5 x 10 s to the step, 42.25 GiB of checkpoints at "
                                     "0.25 GiB/s (169 s), at least 20 s")


def test_step_times_are_the_longest_seen_start_up_counted_only_before_a_step_end_was_seen():
    clock = [0.0]
    times = StepTimes(clock=lambda: clock[0])
    for at, steps in [(0, {"a": 0, "b": 7}), (30, {"a": 1, "b": 7}), (40, {"a": 2, "b": 7}), (44, {"a": 4, "b": 7})]:
        clock[0] = at
        times.look({name: {"step": step} for name, step in steps.items()})
    assert times.step_s("a") == 10.0  # 30 s to step 1 counted start-up: the steps after it are 10 s and 2 s
    assert times.step_s("b") is None  # a resumed policy not yet seen to step
    # every policy to step 5: a 1 step to go (10 s); b 2 steps, as slow as the slowest seen (2 x 10 s)
    assert times.to_step(5, {"a": {"step": 4}, "b": {"step": 3}}) == 20.0
    assert times.to_step(5, {"a": {"step": 5, "phase": "stopping"}, "b": {"step": 9, "phase": "finished"}}) == 0.0
    clock[0] = 50
    times.look({"a": {"step": 1}})  # a restart from a checkpoint: measured afresh, its longest kept
    clock[0] = 80
    times.look({"a": {"step": 2}})
    assert times.step_s("a") == 10.0
    assert StepTimes().to_step(3, {"a": {"step": 2}}) == 0.0  # nothing seen: the floor and the plan decide


def test_the_fault_hooks_parse_their_settings(monkeypatch):
    monkeypatch.setenv(fault_injection.SAVE_DELAY_ENV, "tiny-bpe=4, tiny-sp=0.5")
    assert (fault_injection.save_delay("tiny-bpe"), fault_injection.save_delay("tiny-sp"), fault_injection.save_delay("other")) == (4.0, 0.5, 0.0)
    monkeypatch.setenv(fault_injection.STOP_GRACE_ENV, "1,0.004")
    assert fault_injection.stop_grace() == (1.0, 0.004)
    monkeypatch.setenv(fault_injection.STOP_GRACE_ENV, "1")
    with pytest.raises(ValueError, match="floor_s,write_gib_per_s"):
        fault_injection.stop_grace()
    monkeypatch.delenv(fault_injection.STOP_GRACE_ENV)
    assert fault_injection.stop_grace() is None


def test_a_slurm_array_asks_for_its_warning_from_the_runs_plans():
    plan = SimpleNamespace(disk=SimpleNamespace(policies=[SimpleNamespace(checkpoint_gib=52.0)]))
    small = SimpleNamespace(disk=None)
    assert stop_signal(SlurmOptions(time_min=240), [small, plan]).signal_s == 1108  # the largest run's checkpoints
    assert stop_signal(SlurmOptions(time_min=240), []).signal_s == 900  # nothing planned: a step alone
    assert stop_signal(SlurmOptions(time_min=240, signal_s=300), [plan]).signal_s == 300  # given: kept


@pytest.mark.parametrize("pace, save_s, budget, says, saved", [
    ("0.05", "1.5", StopBudget(save_gib=3.0, floor_s=0.5, write_gib_per_s=1.0), "", True),  # the plan's 3 s save
    ("0.05", "1.5", StopBudget(save_gib=0.0, floor_s=0.5, write_gib_per_s=1.0), "", False),  # the floor alone: killed
    ("0.05", "1.5", StopBudget(save_gib=0.0, floor_s=0.5, write_gib_per_s=1.0), "says-saving", True),  # waited for
    pytest.param("2.0", "0.2", StopBudget(save_gib=0.0, floor_s=0.1, write_gib_per_s=1.0), "", True,  # a 2 s step
                 marks=pytest.mark.slow),  # 6 s on the 2-core box: the full suite, not the fast tier
], ids=["planned-save", "floor-only", "floor-only-saying-saving", "measured-step"])
def test_a_policy_slower_to_save_than_the_floor_saves_its_step_in_flight_within_the_grace(tmp_path, pace, save_s,
                                                                                          budget, says, saved):
    """The floor made smaller and the save seconds long, the same arithmetic as a 20 s floor against a 52 GiB
    checkpoint: the worker saves where the plan's save or its measured step gives it the time, or where it says it
    is still saving when the grace ends, and is killed where none of these holds."""
    script = tmp_path / "slow_saver.py"
    script.write_text(FAKE_POLICY)
    argv = [sys.executable, str(script), str(tmp_path), "a", pace, save_s, *([says] if says else [])]
    procs = [PolicyProcess(name="a", argv=argv, env={}, log_path=tmp_path / "logs" / "a.log")]
    settings = PoolSettings(tmp_path / "see", stall_timeout_s=60.0, grace_s=20.0, poll_s=0.05, stop=budget)
    out = io.StringIO()
    outcome = StoppedAtStep(procs, RunPaths(tmp_path), settings, at=2, console=Console(file=out, width=300)).run()
    assert outcome.reason == "interrupted"
    assert (outcome.returncodes["a"] == 75) is saved and (tmp_path / "a.saved").exists() is saved
    assert re.search(r"stopping: each policy saves its step in flight \(checkpoint-\d+\); waiting up to \d+ s: ",
                     out.getvalue()), out.getvalue()
    assert ("a: still writing its checkpoint after the grace: waiting for it" in out.getvalue()) is bool(says)


SUBMITIT_TASK = """
import signal, sys
signal.signal(signal.SIGUSR2, lambda *a: sys.exit(3))  # submitit's handler: ends the task (and Slurm its step)
from mutualrl.launch.sweep.slurm import train_job
train_job([sys.executable, '-c', {run!r}, {out!r}], {cwd!r})
"""

SAVING_RUN = """
import signal, sys, time
from pathlib import Path
def stop(*a):
    time.sleep(1.0)  # a step and a save
    Path(sys.argv[1]).write_text("saved")
    sys.exit(130)
signal.signal(signal.SIGUSR2, stop)
Path(sys.argv[1] + ".up").write_text("up")
time.sleep(30)
"""


def test_the_warning_before_a_slurm_time_limit_reaches_the_run_and_the_task_waits_for_its_save(tmp_path: Path):
    """submitit asks for SIGUSR2 before the time limit and its own handler ends the task at once (Slurm then ends
    every process of its step, the run mid-save); the task passes the signal on instead and waits for the run."""
    import signal
    import subprocess
    import time

    out = tmp_path / "out"
    task = SUBMITIT_TASK.format(run=SAVING_RUN, out=str(out), cwd=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", task], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not Path(f"{out}.up").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR2)
    _, err = proc.communicate(timeout=30)
    assert out.read_text() == "saved"
    assert proc.returncode == 1 and "exited 130" in err  # the run's own stop, reported as the task's failure


def test_a_periodic_save_leaves_no_saving_phase_behind_for_a_later_stop_to_wait_on(tmp_path, monkeypatch):
    """A standalone policy writes no phase of its own between saves: the 'saving' of its step-20 checkpoint stood in
    its status until the run ended, and a stop whose grace ran out waited up to SAVE_WAIT_CAP_S on a policy that was
    not saving (a hung one: 30 minutes). After the save its status says 'training' again."""
    from mutualrl.launch.supervise.stop_grace import still_saving
    from mutualrl.run_folder import read_status
    from mutualrl.training.callbacks import StatusCallback
    from mutualrl.training.trainer import MutualGRPOTrainer

    parent = next(cls for cls in MutualGRPOTrainer.__mro__[1:] if "_save_checkpoint" in vars(cls))
    seen: list[str] = []
    status = StatusCallback(RunPaths(tmp_path), "a")
    state = SimpleNamespace(global_step=20, max_steps=100)
    status.write(state, "training")

    def transformers_save(self, model, trial):
        seen.append(read_status(RunPaths(tmp_path).status("a"))["phase"])

    monkeypatch.setattr(parent, "_save_checkpoint", transformers_save)
    trainer = MutualGRPOTrainer.__new__(MutualGRPOTrainer)
    trainer.__dict__.update(state=state, policy_name="a", args=SimpleNamespace(should_save=False),
                            accelerator=SimpleNamespace(wait_for_everyone=lambda: None),
                            regime=SimpleNamespace(phase_hook=lambda phase: status.write(state, phase)))
    monkeypatch.setattr(MutualGRPOTrainer, "_get_output_dir", lambda self, trial: str(tmp_path / "policies" / "a"))
    trainer._save_checkpoint(None, None)
    assert seen == ["saving"]  # while transformers writes: what the launcher's stop waits on
    after = read_status(RunPaths(tmp_path).status("a"))
    assert after["phase"] == "training" and still_saving({"a": after}) == []

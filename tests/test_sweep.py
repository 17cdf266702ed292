"""`mutualrl sweep`: the grid, each run's train command, the dry run, and the Slurm path (the job array submitit
builds, with sbatch replaced by echo; and run by submitit's local executor)."""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.errors import UsageError
from mutualrl.launch.sweep.grid import SweepSpec, parse_grid, read_grid_file, train_command
from mutualrl.launch.sweep.slurm import SlurmOptions, submit_array
from user_folders import USER_TASK, make_user_folder


def test_the_grid_is_regimes_by_settings_by_seeds_with_a_folder_each(tmp_path: Path) -> None:
    spec = SweepSpec(tmp_path / "sw", ["standalone", "sgt"], [1, 2], parse_grid(["grpo.learning_rate=1e-5,2e-5"]),
                     pool="tiny", max_steps=3, sets=USER_TASK)
    points = spec.points()
    assert [p.name for p in points] == [f"{r}-learning_rate{lr}-seed{s}" for r in ("standalone", "sgt")
                                        for lr in ("1e-5", "2e-5") for s in (1, 2)]
    argv = spec.argv(points[-1])
    assert argv == ["--regime", "sgt", "--seed", "2", "--pool", "tiny", "--max-steps", "3",
                    "--set", "task.stop_after_no_reward_steps=0",  # a sweep trains every run to its end
                    *[x for s in USER_TASK for x in ("--set", s)], "--set", "grpo.learning_rate=2e-5",
                    "-o", str(tmp_path / "sw" / "sgt-learning_rate2e-5-seed2")]
    assert spec.argv(points[0], resume=True)[-1] == "--resume"


def test_grid_options_and_files_are_checked(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="expected KEY=VALUE1,VALUE2"):
        parse_grid(["grpo.learning_rate"])
    grid = tmp_path / "grid.yaml"
    grid.write_text("regimes: [standalone, sgt]\nseeds: [4, 5]\ngrid: {grpo.beta: [0, 0.04]}\nset: [grpo.max_steps=2]\n")
    assert read_grid_file(grid) == {"regimes": ["standalone", "sgt"], "seeds": [4, 5],
                                    "grid": [("grpo.beta", ["0", "0.04"])], "set": ["grpo.max_steps=2"]}
    grid.write_text("regime: [sgt]\n")
    with pytest.raises(UsageError, match="expected a mapping with keys grid, regimes, seeds, set; got .regime."):
        read_grid_file(grid)


@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A researcher's folder outside the clone: data/ and my_rewards.py, the working directory."""
    return make_user_folder(tmp_path, monkeypatch)


@pytest.mark.slow
def test_dry_run_names_every_run_and_its_command_from_the_callers_folder(user_folder: Path) -> None:
    args = ["sweep", "--regimes", "standalone,sgt", "--seeds", "1,2", "--max-steps", "2", "-o", "sweeps/mine",
            "--dry-run", *[x for s in USER_TASK for x in ("--set", s)]]
    done = CliRunner().invoke(app, args, terminal_width=400)
    assert done.exit_code == 0, done.output
    assert "4 runs (2 regimes x 1 settings x 2 seeds)" in done.output and "4 to train" in done.output
    assert (f"sgt-seed2: new: mutualrl train --regime sgt --seed 2 --pool tiny --max-steps 2 --set "
            f"task.stop_after_no_reward_steps=0 --set task.name=dataset --set "
            f"task.source=data --set 'task.reward_funcs=[my_rewards.exact]' -o {user_folder}/sweeps/mine/sgt-seed2"
            in done.output)
    assert "every run: task.stop_after_no_reward_steps=0 (a sweep trains each run to its end" in done.output
    # the go/no-go's wait says what it does and how far (piped: lines, not a spinner that prints nothing)
    assert "go/no-go: scoring 2 policies on 18 training rows (greedy" in done.output
    assert "go/no-go: scoring with tiny-sp; tiny-sp: 18/18 rows (" in done.output
    assert not (user_folder / "sweeps").exists()  # a dry run writes nothing: no folder, no sweep.json (issue 68)


def test_an_unknown_regime_is_refused_before_anything(user_folder: Path) -> None:
    done = CliRunner().invoke(app, ["sweep", "--regimes", "standalone,sgtt", "-o", "sw"])
    assert done.exit_code != 0 and "--regimes" in done.output and not (user_folder / "sw").exists()


def test_the_slurm_path_builds_one_job_array_of_the_runs(user_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """submitit's own Slurm submission, with `srun` present and `sbatch` answered by echo: the array's sbatch
    script and the pickled call of every task, as a cluster would receive them."""
    from submitit.slurm.slurm import SlurmExecutor

    monkeypatch.setattr(SlurmExecutor, "affinity", classmethod(lambda cls: 1))
    monkeypatch.setattr(SlurmExecutor, "_make_submission_command",
                        lambda self, path: ["echo", "Submitted batch job 4242"])
    spec = SweepSpec(user_folder / "sw", ["standalone", "sgt"], [1, 2, 3], max_steps=2, sets=USER_TASK)
    commands = [train_command(spec, point, resume=False) for point in spec.points()]
    jobs = submit_array(spec, commands, SlurmOptions(partition="gpu", gpus_per_task=1, parallel=2, time_min=30,
                                                     signal_s=900))
    assert [job.job_id for job in jobs] == [f"4242_{i}" for i in range(6)]
    script = next((user_folder / "sw" / "slurm").rglob("*submission_file*.sh")).read_text()
    for line in ("#SBATCH --array=0-5%2", "#SBATCH --partition=gpu", "#SBATCH --gpus-per-node=1",
                 "#SBATCH --time=30", "#SBATCH --cpus-per-task=4", "#SBATCH --signal=USR2@900"):
        assert line in script
    calls = [pickle.loads(job.paths.submitted_pickle.read_bytes()) for job in jobs]
    assert [call.args for call in calls] == [(command, str(user_folder), None) for command in commands]
    assert calls[0].args[0][:5] == [sys.executable, "-P", "-m", "mutualrl", "train"]


@pytest.mark.slow
def test_submitits_local_executor_runs_the_array(user_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same array run by submitit's local executor: each task ran its run's train command (as a dry run: a real
    launch trains) in the sweep's folder and exited 0."""
    spec = SweepSpec(user_folder / "sw", ["standalone", "sgt"], [1], max_steps=2, sets=USER_TASK)
    commands = [[*train_command(spec, point, resume=False), "--dry-run"] for point in spec.points()]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(user_folder), os.environ.get("PYTHONPATH", "")]))
    jobs = submit_array(spec, commands, SlurmOptions(local=True, parallel=2, time_min=5))
    assert [job.result() for job in jobs] == [0, 0]
    assert [pickle.loads(job.paths.submitted_pickle.read_bytes()).args[0] for job in jobs] == commands


@pytest.mark.slow
def test_a_sweep_trains_then_reuses_and_refuses_a_changed_run(user_folder: Path) -> None:
    """One real run (the tiny pool, 1 step, the user's data from their folder): trained, then reused by the same
    command, then refused when a setting changed, naming it; `report` reads the sweep."""
    args = ["sweep", "--regimes", "standalone", "--seeds", "1", "--max-steps", "1", "-o", "sw",
            *[x for s in [*USER_TASK, "validation.limit=4"] for x in ("--set", s)]]
    runner = CliRunner()
    first = runner.invoke(app, args, terminal_width=300)
    assert first.exit_code == 0, first.output
    assert "0 finished (reused), 0 to resume, 1 to train" in first.output and "sweep finished: 1 runs" in first.output
    again = runner.invoke(app, args, terminal_width=300)
    assert again.exit_code == 0 and "1 finished (reused), 0 to resume, 0 to train" in again.output, again.output
    changed = runner.invoke(app, [*args, "--set", "grpo.learning_rate=2e-5"], terminal_width=300)
    assert changed.exit_code != 0 and "holds a run with other settings or inputs (grpo.learning_rate" in changed.output
    assert "mutualrl sweep reuses a run only when" in changed.output
    report = runner.invoke(app, ["report", "sw", "--format", "json"])
    rows = json.loads(report.output)["rows"]
    assert {row["policy"] for row in rows} == {"tiny-bpe", "tiny-sp"} and all(row["n"] == 1 for row in rows)


STOPPABLE_RUN = """
import signal, sys, time
from pathlib import Path
signal.signal(signal.SIGTERM, lambda *a: (Path(sys.argv[1]).write_text("SIGTERM"), sys.exit(130)))
Path(sys.argv[1] + ".up").write_text("up")
time.sleep(30)
"""


def test_a_task_cancelled_by_submitits_local_executor_passes_the_stop_on_to_its_run(tmp_path: Path) -> None:
    """submitit's local cancel is a SIGINT to the task (then SIGKILL): the task's run gets a SIGTERM, the stop that
    saves a checkpoint at the step in flight (training/stop_request.py); the task stops too."""
    import signal
    import subprocess
    import time

    got = tmp_path / "got"
    # SIGINT's default handler, as in a task started from a terminal: a suite started in the background (`cmd &`)
    # hands its children SIGINT ignored, and Python then keeps it ignored.
    task = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from mutualrl.launch.sweep.slurm import train_job; "
            f"train_job([sys.executable, '-c', {STOPPABLE_RUN!r}, {str(got)!r}], {str(tmp_path)!r})")
    proc = subprocess.Popen([sys.executable, "-c", task], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not Path(f"{got}.up").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert got.read_text() == "SIGTERM" and proc.returncode != 0 and "KeyboardInterrupt" in err


def test_a_cancel_while_the_run_starts_is_held_until_the_run_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGINT that lands inside Popen (the run already started) is returned, not raised there: the task then passes
    the stop on to that run instead of leaving it unknown."""
    import signal

    from mutualrl.launch.sweep import slurm

    started = object()

    def popen_interrupted(*args: object, **kwargs: object) -> object:
        os.kill(os.getpid(), signal.SIGINT)  # the cancel arrives while the child starts
        return started

    monkeypatch.setattr(slurm.subprocess, "Popen", popen_interrupted)
    # the task's own SIGINT handler is Python's default (another in-process test, or a suite started in the
    # background, may have left this process another one)
    suite_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert slurm.start_holding_sigint(["x"], ".", None) == (started, True)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, suite_handler)

"""``sweep --slurm`` executes no pickle from the shared sweep folder but the ones its submitter wrote (issue 68): the
job script's python command carries the sha256 of each, and an array task whose ``<job>_submitted.pkl`` was
swapped refuses it in one line, nothing of it loaded. The array is built by submitit's own Slurm submission with
``sbatch`` answered by echo, and its task run as Slurm would run it (the script's command, Slurm's variables)."""

from __future__ import annotations

import os
import pathlib
import pickle
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mutualrl.launch.sweep.grid import SweepSpec
from mutualrl.launch.sweep.slurm import SlurmOptions, submit_array


class Planted:
    """A pickle that runs code as it is loaded: it writes ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.write_text, (self.path, "planted code ran"))


def marker_commands(folder: Path, n: int) -> list[list[str]]:
    """Stand-ins for the runs' train commands: each writes ``ran-<i>`` (no training)."""
    return [[sys.executable, "-c", f"import pathlib; pathlib.Path({str(folder / f'ran-{i}')!r}).write_text('ran')"]
            for i in range(n)]


def submitted_array(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list, list[str]]:
    """A two-task array as submitit submits it to Slurm; its jobs and the task command of its script."""
    from submitit.slurm.slurm import SlurmExecutor

    monkeypatch.setattr(SlurmExecutor, "affinity", classmethod(lambda cls: 1))
    monkeypatch.setattr(SlurmExecutor, "_make_submission_command",
                        lambda self, path: ["echo", "Submitted batch job 4242"])
    spec = SweepSpec(tmp_path / "sw", ["standalone"], [1, 2], max_steps=1)
    jobs = submit_array(spec, marker_commands(tmp_path, 2), SlurmOptions(time_min=5))
    script = next((tmp_path / "sw" / "slurm").rglob("*submission_file*.sh")).read_text()
    words = shlex.split(next(line for line in script.splitlines() if line.startswith("srun ")))
    return jobs, words[words.index(sys.executable):]  # srun's own options come first


def run_task(command: list[str], index: int) -> subprocess.CompletedProcess:
    """Array task ``index`` of job 4242 as Slurm starts it on a node."""
    env = {**os.environ, "SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": str(5000 + index), "SLURM_ARRAY_JOB_ID": "4242",
           "SLURM_ARRAY_TASK_ID": str(index), "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
           "SLURM_NTASKS": "1", "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "node1"}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_a_task_runs_its_own_pickle_and_refuses_a_swapped_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs, command = submitted_array(tmp_path, monkeypatch)
    assert command[1:5] == ["-P", "-u", "-m", "mutualrl.launch.verified_submit"]  # -P: no module of the cwd
    genuine = run_task(command, 0)
    assert genuine.returncode == 0, genuine.stderr
    assert (tmp_path / "ran-0").read_text() == "ran" and jobs[0].paths.result_pickle.is_file()

    planted = tmp_path / "planted"
    jobs[1].paths.submitted_pickle.write_bytes(pickle.dumps(Planted(planted)))
    swapped = run_task(command, 1)
    said = [line for line in swapped.stderr.splitlines() if line.startswith("mutualrl sweep:")]
    assert swapped.returncode == 2 and len(said) == 1 and "Traceback" not in swapped.stderr, swapped.stderr
    assert f"{jobs[1].paths.submitted_pickle}: refused, not loaded" in said[0]
    assert not planted.exists() and not (tmp_path / "ran-1").exists()


def test_a_pickle_of_the_same_array_is_a_call_its_submitter_made(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The digests are the array's: a task given another task's pickle runs that call (no code of a stranger)."""
    jobs, command = submitted_array(tmp_path, monkeypatch)
    jobs[1].paths.submitted_pickle.write_bytes(jobs[0].paths.submitted_pickle.read_bytes())
    assert run_task(command, 1).returncode == 0 and (tmp_path / "ran-0").is_file()


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_submitits_local_executor_runs_the_checked_tasks(tmp_path: Path) -> None:
    """``--slurm-local``: submitit's local executor starts the same checked command for each task."""
    spec = SweepSpec(tmp_path / "sw", ["standalone"], [1, 2], max_steps=1)
    jobs = submit_array(spec, marker_commands(tmp_path, 2), SlurmOptions(local=True, parallel=2, time_min=5))
    assert [job.result() for job in jobs] == [0, 0]
    assert all((tmp_path / f"ran-{i}").is_file() for i in range(2))


def test_a_link_planted_at_the_slurm_folder_or_a_jobs_folder_gets_nothing_written_through_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one write rule covers the folders submitit writes into: ``SWEEP/slurm`` itself (checked before
    anything is written) and ``SWEEP/slurm/<job id>``, whose name is known only once Slurm answered (the script and
    the pickles are moved there): a link at either is refused in one line, nothing lands where it points."""
    from mutualrl.errors import UsageError

    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "slurm").symlink_to(outside)
    with pytest.raises(UsageError) as err:
        submitted_array(tmp_path, monkeypatch)
    assert "slurm: a link" in str(err.value) and "\n" not in str(err.value)
    assert list(outside.iterdir()) == []

    (tmp_path / "sw" / "slurm").unlink()
    (tmp_path / "sw" / "slurm").mkdir()
    (tmp_path / "sw" / "slurm" / "4242_0").symlink_to(outside)  # the job id Slurm will answer: predictable
    with pytest.raises(UsageError) as err:
        submitted_array(tmp_path, monkeypatch)
    assert "4242_0: a link" in str(err.value) and "\n" not in str(err.value)
    assert list(outside.iterdir()) == []

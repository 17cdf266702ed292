"""`mutualrl sweep --slurm` says what each array task needs (issue 65): the GPUs the runs ask for (a GPU pool that
names no count is refused naming --slurm-gpus), --slurm-mem and --slurm-cpus reaching the sbatch script, the
array's resources shown before submission and under --dry-run, and the asset cache recorded in sweep.json and
checked by each task before its run starts."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.errors import UsageError
from mutualrl.launch.sweep.task_needs import task_cache_env, task_gpus
from mutualrl.launch.sweep.slurm import train_job
from user_folders import USER_TASK, make_user_folder

SETS = [x for s in USER_TASK for x in ("--set", s)]


@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A researcher's folder outside the clone: data/ and my_rewards.py, the working directory."""
    return make_user_folder(tmp_path, monkeypatch)


def one_line_error(done) -> str:
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert done.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), done.output
    return lines[0]


def config(gpus=None, device_map=None, deepspeed="none", grpo=None, nodes=1):
    """What task_gpus reads of a resolved RunConfig."""
    return SimpleNamespace(launch=SimpleNamespace(gpus=gpus, device_map=device_map, deepspeed=deepspeed, nodes=nodes),
                           grpo=grpo or {}, pool=SimpleNamespace(policies=[SimpleNamespace(grpo={})]))


def test_the_gpus_a_task_gets_are_what_the_runs_ask_for() -> None:
    assert task_gpus([config()], None, "tiny") == 0  # a CPU pool
    assert task_gpus([config(gpus=2), config(gpus=4)], None, "p") == 4  # a grid over launch.gpus: the most
    assert task_gpus([config(device_map={"a": [0, 1], "b": [2]})], None, "p") == 3
    assert task_gpus([config(deepspeed="zero3", gpus=0)], None, "p") == 0  # launch.gpus=0: the CPU, said so
    assert task_gpus([config(deepspeed="zero3", grpo={"use_vllm": True})], 8, "2qwen") == 8
    with pytest.raises(UsageError, match=r"^--slurm-gpus: the runs of pool 2qwen train on GPUs \(launch.deepspeed="
                       r"zero3, grpo.use_vllm=true\) and name no count; give --slurm-gpus N"):
        task_gpus([config(deepspeed="zero3", grpo={"use_vllm": True})], None, "2qwen")
    with pytest.raises(UsageError, match=r"^--slurm-gpus 0: the runs of pool 2qwen train on GPUs"):
        task_gpus([config(grpo={"bf16": True})], 0, "2qwen")
    with pytest.raises(UsageError, match=r"^--slurm-gpus 2: the runs ask for 4 GPUs each"):
        task_gpus([config(gpus=4)], 2, "p")
    with pytest.raises(UsageError, match=r"launch.nodes=2: each array task is one machine"):
        task_gpus([config(nodes=2)], 8, "p")


def test_the_array_resources_reach_the_sbatch_script(user_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sweep --slurm` through submitit's own Slurm submission (`srun` present, `sbatch` answered by echo): the
    GPUs from launch.gpus, --slurm-mem and --slurm-cpus in the array's script, said before submission; sweep.json
    holds the resources and the cache, and every task's pickled call carries the cache record it checks."""
    from submitit.slurm.slurm import SlurmExecutor

    monkeypatch.setattr(SlurmExecutor, "affinity", classmethod(lambda cls: 1))
    monkeypatch.setattr(SlurmExecutor, "_make_submission_command",
                        lambda self, path: ["echo", "Submitted batch job 77"])
    monkeypatch.setenv("MUTUALRL_CACHE", str(user_folder / "cache"))
    args = ["sweep", "--regimes", "standalone,sgt", "--seeds", "1", "-o", "sw", "--slurm", "--slurm-mem", "48",
            "--slurm-cpus", "6", "--slurm-partition", "gpu", "--slurm-time", "90", *SETS, "--set", "launch.gpus=2"]
    done = CliRunner().invoke(app, args, terminal_width=400)
    assert done.exit_code == 0, done.output
    assert ("job array: 2 tasks (at most 2 at once), each 2 GPUs, 6 CPUs, 48 GB memory, 90 min, partition gpu"
            in done.output) and "submitted job array 77 (2 runs" in done.output
    assert f"asset cache {user_folder / 'cache'} (MUTUALRL_CACHE" in done.output
    script = next((user_folder / "sw" / "slurm").rglob("*submission_file*.sh")).read_text()
    for line in ("#SBATCH --gpus-per-node=2", "#SBATCH --cpus-per-task=6", "#SBATCH --mem=48GB",
                 "#SBATCH --partition=gpu", "#SBATCH --time=90", "#SBATCH --array=0-1%2"):
        assert line in script
    record = json.loads((user_folder / "sw" / "sweep.json").read_text())
    assert record["slurm"]["gpus_per_task"] == 2 and record["slurm"]["mem_gb"] == 48
    # the warning before the time limit: a step (1.5 x 600 s) and the plan's checkpoints (stop_grace.warning_s)
    warned = record["slurm"]["signal_s"]
    assert 900 <= warned < 1000 and f"#SBATCH --signal=USR2@{warned}" in script
    assert f"stop signal {warned} s before the limit" in done.output
    assert record["cache"]["folder"] == str(user_folder / "cache")
    assert [Path(a).name.split("-")[:2] for a in record["cache"]["assets"]] == [["tiny", "bpe"], ["tiny", "sp"]]
    pickled = [pickle.loads(p.read_bytes()) for p in (user_folder / "sw" / "slurm").rglob("*_submitted.pkl")]
    assert len(pickled) == 2 and all(call.args[2] == record["cache"] for call in pickled)


@pytest.mark.slow
def test_the_dry_run_shows_the_array_and_a_gpu_pool_without_a_count_is_refused(user_folder: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(app, ["sweep", "--regimes", "standalone", "--seeds", "1,2", "-o", "sw", "--slurm",
                               "--dry-run", *SETS], terminal_width=400)
    assert done.exit_code == 0, done.output
    assert ("job array: 2 tasks (at most 2 at once), each 0 GPUs, 4 CPUs, the partition's default memory, 240 min, "
            "partition (the default)") in done.output
    assert not (user_folder / "sw" / "slurm").exists()  # nothing submitted
    refused = runner.invoke(app, ["sweep", "--regimes", "standalone", "--seeds", "1", "-o", "sw2", "--slurm",
                                  "--dry-run", *SETS, "--set", "launch.deepspeed=zero2"], terminal_width=400)
    assert "--slurm-gpus: the runs of pool tiny train on GPUs (launch.deepspeed=zero2)" in one_line_error(refused)
    assert "--slurm-mem: only with --slurm" in one_line_error(runner.invoke(app, ["sweep", "-o", "sw3",
                                                                                   "--slurm-mem", "8"]))


def test_a_task_uses_the_sweeps_cache_when_its_environment_names_none(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "models" / "tiny-bpe-1").mkdir(parents=True)
    record = {"folder": str(cache), "assets": ["models/tiny-bpe-1"]}
    env, note = task_cache_env(record, {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "MUTUALRL_CACHE": str(cache)} and note is None
    env, note = task_cache_env(record, {"MUTUALRL_CACHE": str(cache)})
    assert env["MUTUALRL_CACHE"] == str(cache) and note is None


def test_a_task_pointing_at_another_cache_without_the_assets_refuses_in_one_line(tmp_path: Path) -> None:
    cache, other = tmp_path / "cache", tmp_path / "other"
    (cache / "models" / "tiny-bpe-1").mkdir(parents=True)
    record = {"folder": str(cache), "assets": ["models/tiny-bpe-1"]}
    with pytest.raises(UsageError) as err:
        task_cache_env(record, {"MUTUALRL_CACHE": str(other)})
    assert str(err.value) == (f"MUTUALRL_CACHE={other} is not the sweep's asset cache {cache} and lacks "
                              f"models/tiny-bpe-1: unset it in the job's environment (the task then uses {cache}) "
                              "or point it at that folder")
    (other / "models" / "tiny-bpe-1").mkdir(parents=True)  # another cache that holds them: used, and said
    env, note = task_cache_env(record, {"MUTUALRL_CACHE": str(other)})
    assert env["MUTUALRL_CACHE"] == str(other) and note.startswith(f"MUTUALRL_CACHE={other}, not the sweep's")


def test_the_sweeps_cache_missing_or_lacking_assets_is_said_in_one_line(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    record = {"folder": str(cache), "assets": ["models/tiny-sp-2"]}
    with pytest.raises(UsageError, match=r"^the sweep's asset cache .* is not on this machine: put it on a "
                       r"filesystem the nodes share, or set MUTUALRL_CACHE to a cache here holding models/tiny-sp-2$"):
        task_cache_env(record, {})
    cache.mkdir()
    assert task_cache_env(record, {})[1] == (f"the asset cache {cache} lacks models/tiny-sp-2: this task builds "
                                             "them there (minutes)")


def test_an_array_task_checks_its_cache_before_its_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capfd: pytest.CaptureFixture[str]) -> None:
    """The task function itself: the run's command sees the sweep's cache; a refused cache starts no command."""
    cache, seen = tmp_path / "cache", tmp_path / "seen.txt"
    (cache / "models" / "m").mkdir(parents=True)
    record = {"folder": str(cache), "assets": ["models/m"]}
    command = [sys.executable, "-c", f"import os; open({str(seen)!r}, 'w').write(os.environ['MUTUALRL_CACHE'])"]
    monkeypatch.delenv("MUTUALRL_CACHE", raising=False)
    assert train_job(command, str(tmp_path), record) == 0 and seen.read_text() == str(cache)
    seen.unlink()
    monkeypatch.setenv("MUTUALRL_CACHE", str(tmp_path / "elsewhere"))
    with pytest.raises(UsageError):
        train_job(command, str(tmp_path), record)
    assert not seen.exists()
    lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"mutualrl sweep: MUTUALRL_CACHE={tmp_path / 'elsewhere'} is "
                                                   "not the sweep's asset cache")


@pytest.mark.slow
def test_submitits_local_executor_task_refuses_another_cache(user_folder: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The array as submitit's local executor runs it: a task whose MUTUALRL_CACHE names a folder without the runs'
    models fails before its run starts, its log ending in the one line that says why."""
    from submitit.core.utils import FailedJobError

    from mutualrl.launch.sweep.grid import SweepSpec, train_command
    from mutualrl.launch.sweep.slurm import SlurmOptions, submit_array

    spec = SweepSpec(user_folder / "sw", ["standalone"], [1], max_steps=1, sets=USER_TASK)
    commands = [[*train_command(spec, point, resume=False), "--dry-run"] for point in spec.points()]
    record = {"folder": str(user_folder / "cache"), "assets": ["models/tiny-bpe-0"]}
    monkeypatch.setenv("MUTUALRL_CACHE", str(user_folder / "elsewhere"))
    [job] = submit_array(spec, commands, SlurmOptions(local=True, time_min=5), record)
    with pytest.raises(FailedJobError):
        job.result()
    said = [line for line in job.stderr().splitlines() if line.startswith("mutualrl sweep:")]
    assert said == [f"mutualrl sweep: MUTUALRL_CACHE={user_folder / 'elsewhere'} is not the sweep's asset cache "
                    f"{user_folder / 'cache'} and lacks models/tiny-bpe-0: unset it in the job's environment (the task "
                    f"then uses {user_folder / 'cache'}) or point it at that folder"]
    assert not (user_folder / "sw" / "standalone-seed1").exists()

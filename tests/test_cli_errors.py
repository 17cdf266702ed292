"""Bad input: a one-line error naming the option or field, a non-zero exit, no traceback, nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mutualrl.cli.main import run
from mutualrl.config.typed import to_plain
from mutualrl.launch.run import TrainOptions, resolve_config
from mutualrl.run_folder import RUN_MARKER


def snapshot(root: Path) -> dict[str, tuple[int, float]]:
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime) for p in root.rglob("*")}


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    code = run(argv)
    captured = capsys.readouterr()
    return code, captured.err


def assert_one_line_error(code: int, err: str, *needles: str, exit_code: int = 2) -> None:
    assert code == exit_code, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], err


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("user data\n")
    return tmp_path


BAD_INPUTS = [
    (["train", "--max-steps", "-5"], ["--max-steps"]),
    (["train", "--max-steps", "0"], ["--max-steps"]),
    (["train", "--seed", "-1"], ["--seed"]),
    (["train", "--set", "grpo.learning_rate=-1"], ["grpo.learning_rate", "> 0"]),
    (["train", "--set", "grpo.learning_rate=[x]"], ["grpo.learning_rate"]),
    (["train", "--set", "grpo.num_generations=1"], ["grpo.num_generations"]),
    (["train", "--set", "grpo.no_such_field=1"], ["grpo.no_such_field"]),
    (["train", "--set", "see.barrier_timeout_s=-3"], ["see.barrier_timeout_s"]),
    (["train", "--set", "regime.sgt.lam=-1"], ["regime.sgt.lam"]),
    (["train", "--set", "launch.main_process_port=70000"], ["launch.main_process_port"]),
    (["train", "--set", "validation.every_steps=-1"], ["validation.every_steps"]),
    (["train", "--set", "output_dir=runs/{nope}"], ["output_dir", "{pool}"]),
    (["train", "--set", "nonsense"], ["KEY=VALUE"]),
    (["train", "--set", "task.name=nope", "--dry-run"], ["unknown task 'nope'"]),
    (["train", "--set", "task.eval_split=nope", "--dry-run"], ["task.eval_split", "nope"]),
    (["train", "--set", "grpo.temperature=abc"], ["grpo.temperature"]),
    (["train", "--set", "pool.policies.nobody.grpo.beta=1"], ["nobody"]),
    (["train", "-o", "", "--dry-run"], ["--output-dir", "empty"]),
    (["train", "--baseline", "banana"], ["--baseline", "banana"]),
    (["train", "--device-map", "tiny-bpe=0;tiny-sp=9", "--gpus", "3", "--dry-run"], ["--device-map", "[9]"]),
    (["train", "--pool", "/dev/null"], ["/dev/null"]),
    (["train", "--pool", "no-such-pool"], ["no-such-pool"]),
    (["train", "--pool", "smol-lexicon"], ["pool.policies.smollm2-135m.init_adapter",  # no warm start built here
                                           "runs/lexicon-warm-start/adapters/smollm2-135m-velish-seed1",
                                           "python benchmarks/lexicon_warm_start.py train --model smollm2-135m"]),
    (["train", "--regime", "banana"], ["--regime", "banana"]),
    (["train", "-o", "a-file"], ["a-file", "not a folder"]),
    (["train", "-o", "a-file/run"], ["a-file", "not a folder"]),
    (["train", "--device-map", "tiny-bpe"], ["--device-map"]),
    (["train", "--device-map", "tiny-bpe=x"], ["--device-map"]),
    (["train", "--gpus", "-1"], ["--gpus"]),
    (["train", "--no-such-option"], ["--no-such-option"]),
    (["eval", "--device", "banana"], ["--device", "banana"]),
    (["eval", "--max-new-tokens", "-3"], ["--max-new-tokens"]),
    (["eval", "--batch-size", "0"], ["--batch-size"]),
    (["eval", "--limit", "0"], ["--limit"]),
    (["eval", "-o", "a-file/out.json"], ["a-file"]),
    (["thl-check", "--seed", "-1"], ["--seed"]),
    (["see", "inspect", "a-file"], ["a-file"]),
    (["see", "inspect", "missing-folder"], ["missing-folder"]),
    (["plot", ".", "--out", "a-file/plots"], ["a-file"]),
    (["plot", ".", "-o", "a-file/plots"], ["a-file"]),  # -o as in train, eval, distill
    (["plot", ".", "--smooth", "2"], ["--smooth"]),
    (["complementarity", "--buckets", "0"], ["--buckets"]),
]


@pytest.mark.parametrize("argv,needles", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_with_nothing_written(workdir, capsys, argv, needles):
    before = snapshot(workdir)
    code, err = run_cli(argv, capsys)
    assert code != 0
    assert_one_line_error(code, err, *needles, exit_code=code)
    assert code in (1, 2)
    assert snapshot(workdir) == before


def test_braces_in_the_output_folder_are_literal(workdir, capsys):
    assert run(["train", "-o", "my{run}", "--dry-run", "--save-plan", "plan.json"]) == 0
    assert not (workdir / "my{run}").exists()  # a dry run writes nothing
    assert str(workdir / "my{run}") in (workdir / "plan.json").read_text()


def _stored_run(folder: Path, regime: str = "sgt") -> Path:
    """A run folder as `mutualrl train` leaves it once prepared (config.yaml, run.json, marker)."""
    config, source = resolve_config(TrainOptions(output_dir=folder, regime=regime, max_steps=4))
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(f"# resolved from {source}\n" + yaml.safe_dump(to_plain(config)))
    (folder / "run.json").write_text('{"status": "running"}')
    (folder / RUN_MARKER).write_text("{}")
    return folder


def test_resume_refuses_another_regime_or_seed_and_lists_each(workdir, capsys):
    run_dir = _stored_run(workdir / "run")
    before = snapshot(workdir)
    code, err = run_cli(["train", "-o", "run", "--resume", "--regime", "xgrpo", "--seed", "7"], capsys)
    assert_one_line_error(code, err, "may not change", "regime.name: 'sgt' -> 'xgrpo'", "grpo.seed: 42 -> 7")
    assert snapshot(workdir) == before
    code, err = run_cli(["train", "-o", "run", "--resume", "--pool", "2qwen"], capsys)
    assert_one_line_error(code, err, "pool 'tiny'", "not '2qwen'")
    assert run_dir.is_dir()


def test_resume_of_a_named_folder_loads_only_its_own_config(workdir, monkeypatch):
    """`--resume -o RUN`: the run's config.yaml is loaded once; the recipe is read only to find a folder
    (no -o) or to check --pool against the run's pool."""
    import mutualrl.launch.run as run_module

    run_dir = _stored_run(workdir / "run")
    loaded_from: list[str] = []
    real_load = run_module.load_run_config

    def recording_load(source, **kwargs):
        loaded_from.append(source)
        return real_load(source, **kwargs)

    monkeypatch.setattr(run_module, "load_run_config", recording_load)
    config, _ = resolve_config(TrainOptions(output_dir=Path("run"), resume=True, gpus=0))
    assert loaded_from == [str(run_dir / "config.yaml")] and config.grpo["max_steps"] == 4
    assert config.launch.gpus == 0  # a dedicated option, applied typed on top of the stored config
    loaded_from.clear()
    resolve_config(TrainOptions(output_dir=Path("run"), resume=True, pool="tiny"))
    assert loaded_from == ["tiny", str(run_dir / "config.yaml")]  # --pool: checked against the run's pool


def test_resume_of_a_finished_run_starts_no_worker_unless_something_is_left_to_train(workdir, capsys, monkeypatch):
    import mutualrl.launch.run as run_module

    run_dir = _stored_run(workdir / "run")  # 4 steps
    (run_dir / "run.json").write_text('{"status": "done"}')
    summary = {"pool": "tiny", "regime": "sgt", "run_dir": str(run_dir), "seconds": 9.0, "policies": {
        name: {"steps": 4, "eval_before": 0.25, "eval_after": 0.75} for name in ("tiny-bpe", "tiny-sp")}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    for name in ("tiny-bpe", "tiny-sp"):
        (run_dir / "policies" / name / "final").mkdir(parents=True)
    started = []
    monkeypatch.setattr(run_module, "launch_locked", lambda *args, **kwargs: started.append(args) or 0)
    assert run(["train", "-o", "run", "--resume"]) == 0
    out = capsys.readouterr().out
    assert "finished; nothing to resume" in out and "0.250" in out and "0.750" in out and not started
    assert json.loads((run_dir / "run.json").read_text()) == {"status": "done"}  # untouched
    assert json.loads((run_dir / "summary.json").read_text()) == summary  # its seconds too (issue 68)

    def launches(*argv: str) -> bool:
        before = len(started)
        assert run(["train", "-o", "run", "--resume", *argv]) == 0
        return len(started) == before + 1

    assert launches("--max-steps", "6")  # longer: it trains
    config = (run_dir / "config.yaml").read_text()
    (run_dir / "config.yaml").write_text(config.replace("max_steps: 4", "max_steps: 6"))
    assert launches()  # a stopped `--resume --max-steps 6` stored 6 but trained 4: still to train
    (run_dir / "config.yaml").write_text(config)
    (run_dir / "summary.json").write_text(json.dumps({**summary, "lost": {"tiny-sp": {"step": 2, "reason": "x"}}}))
    assert launches()  # a policy left the pool (see.on_peer_failure=continue): it trains again
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "policies" / "tiny-sp" / "final").rmdir()
    assert launches()  # a final model is missing
    (run_dir / "policies" / "tiny-sp" / "final").mkdir()
    (run_dir / "run.json").write_text('{"status": "interrupted"}')
    assert launches()
    (run_dir / "run.json").write_text('{"status": "done"}')
    assert not launches()


def test_overwrite_refuses_a_folder_that_is_not_a_run(workdir, capsys):
    folder = workdir / "mine"
    folder.mkdir()
    (folder / "thesis.tex").write_text("precious")
    code, err = run_cli(["train", "-o", "mine", "--overwrite"], capsys)
    assert_one_line_error(code, err, "not a mutualrl run folder", "nothing was deleted")
    assert (folder / "thesis.tex").read_text() == "precious"
    code, err = run_cli(["train", "-o", "mine"], capsys)
    assert_one_line_error(code, err, "already exists")


def test_resume_refuses_a_symlink_out_of_the_run_folder(workdir, capsys):
    run_dir = _stored_run(workdir / "run")
    (run_dir / "metrics").mkdir()
    (run_dir / "metrics" / "tiny-bpe.jsonl").symlink_to(workdir / "a-file")
    code, err = run_cli(["train", "-o", "run", "--resume"], capsys)
    assert_one_line_error(code, err, "symlink pointing outside", "tiny-bpe.jsonl")
    assert (workdir / "a-file").read_text() == "user data\n"


def test_a_live_run_is_refused_naming_its_holder_and_a_dead_holder_is_taken_over(workdir, capsys):
    run_dir = _stored_run(workdir / "run")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from mutualrl.launch.rundir.lock import RunLock; "
        f"RunLock({str(run_dir)!r}).acquire('test'); print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")})
    try:
        assert holder.stdout.readline().strip() == "held"
        for argv in (["train", "-o", "run", "--resume"], ["train", "-o", "run", "--overwrite"]):
            code, err = run_cli(argv, capsys)
            assert_one_line_error(code, err, "the run is live", f"pid {holder.pid}")
        assert (run_dir / "config.yaml").exists()  # --overwrite deleted nothing
    finally:
        holder.kill()
        holder.wait()
    from mutualrl.launch.rundir.lock import RunLock

    started = time.time()
    with RunLock(run_dir).acquire("test", wait_for_orphans_s=5) as lock:  # the dead holder's lock is free
        assert lock.warning is None  # a real file lock, not the no-locks fallback
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()  # the dead holder's record replaced by ours
    assert time.time() - started < 5


def test_overwrite_into_a_new_folder_or_an_old_run_starts_it(workdir, capsys, monkeypatch):
    import mutualrl.launch.run as launch_run

    launched = []
    monkeypatch.setattr(launch_run, "launch_locked", lambda options, config, source, paths, console, lock, allowed:
                        launched.append(sorted(p.name for p in paths.root.iterdir())) or 0)
    assert run(["train", "-o", "fresh", "--overwrite"]) == 0  # nothing there yet: nothing to delete
    run_dir = _stored_run(workdir / "old")
    (run_dir / "metrics.jsonl").write_text("{}\n")
    assert run(["train", "-o", "old", "--overwrite"]) == 0
    assert launched == [[".lock"], [".lock"]]  # the old run's files were deleted, the lock kept

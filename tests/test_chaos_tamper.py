"""The run-folder tampering chaos (benchmarks/chaos_tamper.py): each damage class applies and is judged right."""

from __future__ import annotations

import json
import random
import zipfile
from pathlib import Path

from bench_helpers import load_benchmark


def _fake_run(root: Path) -> Path:
    """The files of a finished run that tampering picks from (contents small, shapes right)."""
    for folder in ("launch", "status", "eval/a", "policies/a/checkpoint-2", "see/step-000001/a", "metrics", "logs"):
        (root / folder).mkdir(parents=True)
    for name in ("run.json", "summary.json", "launch/plan.json", "launch/a.grpo.json", "status/a.json",
                 "eval/a/step-000002.json", "policies/a/checkpoint-2/trainer_state.json", "see/step-000001/a/r0.json"):
        (root / name).write_text(json.dumps({"status": "done", "global_step": 2}))
    with zipfile.ZipFile(root / "policies/a/checkpoint-2/optimizer.pt", "w") as archive:
        archive.writestr("data.pkl", b"x" * 200)
    (root / "see/step-000001/a/r0.arrow").write_bytes(b"y" * 200)
    rows = [{"kind": "train", "policy": "a", "step": s} for s in (1, 2)] + [{"kind": "eval", "policy": "a", "step": 2}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (root / "metrics/a.jsonl").write_text(text)
    (root / "metrics.jsonl").write_text(text)
    (root / "logs/a.log").write_text("done\n")
    (root / "config.yaml").write_text("pool:\n  name: tiny\n")
    return root


def test_every_damage_class_applies_to_a_run_folder(tmp_path):
    tamper = load_benchmark("chaos_tamper")
    rng = random.Random(0)
    for cls in (c for c in tamper.CLASSES if c != "live"):
        for attempt in range(3):
            run = _fake_run(tmp_path / f"{cls}-{attempt}")
            damage = tamper.tamper(run, cls, rng)
            assert damage["class"] == cls and ((run / damage["path"]).exists() or damage["how"] == "fifo"), damage


def test_every_live_damage_applies_to_a_training_run_folder(tmp_path):
    tamper = load_benchmark("chaos_tamper")
    seen = set()
    for attempt in range(12):
        run = _fake_run(tmp_path / f"live-{attempt}")
        damage = tamper.tamper_live(run, random.Random(attempt))
        seen.add(damage["how"])
        path = run / damage["path"]
        assert (not path.exists()) if damage["how"] == "see deleted" else path.exists(), damage
    assert seen == set(tamper.LIVE_DAMAGE)


def test_the_judge_counts_tracebacks_hangs_untrue_records_and_silent_losses(tmp_path):
    tamper = load_benchmark("chaos_tamper")
    run = _fake_run(tmp_path / "run")
    before = tamper.kept_results(run)
    assert before == ({("a", "train", 1), ("a", "train", 2), ("a", "eval", 2)}, {"eval/a/step-000002.json"})
    clean = [{"output": "fine", "traceback": False, "hung": False}]
    damage = {"class": "metrics", "path": "metrics/a.jsonl", "how": "cut"}
    assert tamper.judge(run, damage, before, clean) == {"tracebacks": 0, "hangs": 0, "run_json_untrue": 0,
                                                        "silently_lost": 0}
    (run / "eval/a/step-000002.json").unlink()
    (run / "run.json").write_text(json.dumps({"status": "running"}))
    bad = [{"output": "Traceback (most recent call last)", "traceback": True, "hung": True}]
    assert tamper.judge(run, damage, before, bad) == {"tracebacks": 1, "hangs": 1, "run_json_untrue": 1,
                                                      "silently_lost": 1}
    named = [{"output": "warning: eval/a/step-000002.json ... a.jsonl: damaged", "traceback": False, "hung": False}]
    assert tamper.judge(run, damage, before, named)["silently_lost"] == 0  # the loss is named, not silent
    left = [{"output": "", "traceback": False, "hung": False, "left_running": True}]
    (run / "run.json").write_text(json.dumps({"status": "failed"}))
    assert tamper.judge(run, damage, before, left)["run_json_untrue"] == 1  # the live launcher left "running"


def test_the_end_of_a_worker_traceback_shown_by_the_launcher_counts_as_one():
    tamper = load_benchmark("chaos_tamper")
    shown = 'last lines of x.log:\n  File \n"/venv/lib/trl/grpo_trainer.py", \nline 2436, in _generate\n'
    assert tamper.has_traceback(shown) and tamper.has_traceback("Traceback (most recent call last):\n")
    assert not tamper.has_traceback("error: run.json: damaged, holds a JSON list where a dict belongs")

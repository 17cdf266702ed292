"""Chaos: kills, damaged checkpoints and a full disk, then --resume; nothing lost, duplicated, stuck or reset."""

from __future__ import annotations

import json
import random
import time

import pytest

from bench_helpers import load_benchmark
from test_checkpoint_integrity import build_checkpoint

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)


def load_chaos():
    return load_benchmark("chaos")


def test_row_counter_sees_lost_and_duplicated_rows(tmp_path):
    chaos = load_chaos()
    rows = [{"kind": "train", "policy": "a", "step": s} for s in range(1, chaos.STEPS + 1)]
    rows += [{"kind": "eval", "policy": "a", "step": s} for s in range(0, chaos.STEPS + 1, chaos.VALIDATE_EVERY)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert chaos.count_rows(tmp_path, ["a"]) == {"rows_lost": 0, "rows_duplicated": 0}
    damaged = [r for r in rows if r["step"] != 3] + [rows[0], {"kind": "train", "policy": "a", "step": chaos.STEPS + 1}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in damaged))
    assert chaos.count_rows(tmp_path, ["a"]) == {"rows_lost": 1, "rows_duplicated": 2}


def test_each_damage_hits_the_newest_checkpoint_and_resume_names_and_skips_it(tmp_path):
    """Every file kind, missing and truncated: the resume's choice skips the folder and names it."""
    load_chaos()
    import chaos_faults
    from mutualrl.launch.rundir.resume import common_checkpoint
    from mutualrl.run_folder import RunPaths

    for kind in chaos_faults.CHECKPOINT_FILES:
        for mode in chaos_faults.DAMAGE_MODES:
            paths = RunPaths(tmp_path / f"{kind}-{mode}")
            for policy in ("a", "b"):
                for step in (2, 4):
                    build_checkpoint(paths.policy_dir(policy) / f"checkpoint-{step}", "full", step)
            damage = chaos_faults.damage_checkpoint(paths.root, random.Random(0), kind, mode)
            assert damage["step"] == 4 and damage["common"], damage
            problems: list[str] = []
            step = common_checkpoint(paths, ["a", "b"], damaged=problems)
            assert step == 2 and any(damage["folder"] in p for p in problems), (kind, mode, problems)
            log = "".join(f"warning: skipping a damaged checkpoint: {p}\n" for p in problems)
            log += f"resuming every policy from checkpoint-{step} (removed ...)\n"
            assert chaos_faults.judge_damage(damage, log) == {"damage_unreported": 0, "damaged_checkpoint_used": 0}
            silent = f"resuming every policy from checkpoint-{damage['step']}\n"
            assert chaos_faults.judge_damage(damage, silent) == {"damage_unreported": 1, "damaged_checkpoint_used": 1}
            assert chaos_faults.judge_damage(damage, "step 0/6 starting\n") is None  # killed before choosing


def test_a_half_saved_newest_checkpoint_is_passed_over_for_the_one_a_resume_would_take(tmp_path):
    load_chaos()
    import chaos_faults

    policy = tmp_path / "policies" / "a"
    build_checkpoint(policy / "checkpoint-2", "full", 2)
    (build_checkpoint(policy / "checkpoint-4", "full", 4, manifest=False) / "rng_state.pth").unlink()  # killed
    damage = chaos_faults.damage_checkpoint(tmp_path, random.Random(0), "rng", "truncated")
    assert damage["step"] == 2 and damage["file"].endswith("checkpoint-2/rng_state.pth"), damage


def test_a_full_disk_must_be_one_line_and_a_failed_run_record():
    load_chaos()
    from chaos_faults import HEARTBEAT_WARNING, judge_disk_full

    line = "error: no space left on /r/metrics.jsonl (1.0 GB free); free some space and run the command again\n"
    failed = {"status": "failed", "reason": "no space left on /r/metrics.jsonl (1.0 GB free)"}
    assert judge_disk_full("step 1/6\n" + line, 1, failed) == {"disk_full_unclear": 0}
    assert judge_disk_full("step 1/6\n" + line, 1, {"status": "running"}) == {"disk_full_unclear": 1}  # stuck
    assert judge_disk_full("Traceback (most recent call last):\n" + line, 1, failed) == {"disk_full_unclear": 1}
    assert judge_disk_full("error: [Errno 28] No space left on device\n", 1, failed) == {"disk_full_unclear": 1}
    assert judge_disk_full("done\n", 0, {"status": "done"}) is None  # the n-th write never came
    warning = f"WARNING {HEARTBEAT_WARNING} /r/see/_heartbeat/a.rank-0.json (no space left on ...)\n"
    assert judge_disk_full("done\n", 0, {"status": "done"}, warning) == {"disk_full_unclear": 0}  # best effort
    assert judge_disk_full("done\n", 0, {"status": "done"}, warning + "Traceback (most") == {"disk_full_unclear": 1}


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_resume_without_the_optimizer_state_is_counted_as_a_reset(tmp_path):
    """A real silent reset: transformers' Trainer resumed from a checkpoint whose optimizer.pt was deleted starts
    a fresh AdamW without a word; the counter finds it in the checkpoints it saves afterwards (and none in a
    run resumed properly)."""
    load_chaos()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    from chaos_faults import optimizer_resets

    def train(output_dir, resume_from=None):
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=1))
        data = [{"input_ids": torch.arange(8) % 32, "labels": torch.arange(8) % 32} for _ in range(16)]
        args = TrainingArguments(output_dir=str(output_dir), max_steps=4, save_steps=2, per_device_train_batch_size=2,
                                 report_to=[], use_cpu=True, logging_steps=100, disable_tqdm=True)
        Trainer(model=model, args=args, train_dataset=data).train(resume_from_checkpoint=resume_from)

    for name in ("silent", "proper"):
        policy = tmp_path / name / "policies" / "a"
        train(policy)
        assert optimizer_resets(tmp_path / name) == []
        (policy / "checkpoint-2" / "mutualrl-manifest.json").unlink(missing_ok=True)
        if name == "silent":
            (policy / "checkpoint-2" / "optimizer.pt").unlink()
        train(policy, resume_from=str(policy / "checkpoint-2"))  # rewrites checkpoint-4
    assert optimizer_resets(tmp_path / "proper") == []
    resets = optimizer_resets(tmp_path / "silent")
    assert len(resets) == 1 and "checkpoint-4: optimizer state at step 2, trainer at step 4" in resets[0], resets


@pytest.mark.slow
def test_every_fault_kind_loses_nothing(tmp_path):
    """Each kind of fault once (three per run, the later ones during the resumes: two runs, eight launches); the
    random trials are ``python benchmarks/chaos.py`` (benchmarks/results/chaos.md), too long for the suite."""
    chaos = load_chaos()
    summary = chaos.run_trials(trials=0, seed=11, out=tmp_path,
                               schedule=[("launcher", "worker", "all"),
                                         ("interrupt", "damage:optimizer:missing", "disk_full")])
    print(f"chaos: {summary['trials']} trials, {summary['faults_injected']} faults {summary['faults_by_kind']} "
          f"{summary['fault_details']}, " + ", ".join(f"{key} {summary[key]}" for key in chaos.MUST_BE_ZERO)
          + f", {summary['seconds']}s")
    assert summary["faults_injected"] >= 5, summary["per_trial"]  # a fault is skipped only if its launch ended first
    assert "damage" in summary["faults_by_kind"], summary["per_trial"]
    assert summary["failed_trials"] == [], summary["per_trial"]
    for key in chaos.MUST_BE_ZERO:
        assert summary[key] == 0, (key, summary["per_trial"])


def test_stuck_means_this_launch_left_the_record_running(tmp_path):
    """A Ctrl-C before the lock leaves an earlier SIGKILLed launcher's "running" untouched: not this launch's doing."""
    chaos = load_chaos()
    record = tmp_path / "run.json"
    record.write_text(json.dumps({"status": "running"}))
    before = chaos.record_mtime(tmp_path)
    assert not chaos.left_running(tmp_path, before)  # untouched since the launch began
    time.sleep(0.01)
    record.write_text(json.dumps({"status": "running"}))  # the launch wrote it, then stopped without a word
    assert chaos.left_running(tmp_path, before)
    record.write_text(json.dumps({"status": "interrupted"}))
    assert not chaos.left_running(tmp_path, before)
    assert not chaos.left_running(tmp_path / "none", None)  # no record at all

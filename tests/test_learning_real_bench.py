"""benchmarks/learning_real.py: its JSON arithmetic on hand-built run summaries."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from learning_real import regime_entry, roles_from, sgt_gains  # noqa: E402


def summary(before: dict[str, float], after: dict[str, float]) -> dict:
    return {"seconds": 10.0, "policies": {p: {"eval_before": before[p], "eval_after": after[p], "steps": 30}
                                          for p in before}}


BEFORE = {"a": 0.30, "b": 0.20}


def test_roles_from_step_zero_validation() -> None:
    assert roles_from(summary(BEFORE, BEFORE)) == {"a": "stronger", "b": "weaker"}
    assert roles_from(summary({"a": 0.2, "b": 0.2}, BEFORE)) == {"a": "weaker", "b": "stronger"}  # tie: first


def test_sgt_gains_and_targets_by_hand() -> None:
    runs = {"standalone": {1: summary(BEFORE, {"a": 0.30, "b": 0.20}), 2: summary(BEFORE, {"a": 0.32, "b": 0.25})},
            "sgt": {1: summary(BEFORE, {"a": 0.31, "b": 0.27}), 2: summary(BEFORE, {"a": 0.32, "b": 0.29})}}
    roles = {"a": "stronger", "b": "weaker"}
    out = sgt_gains(runs, roles)
    assert out["seeds"] == {1: {"a": 0.01, "b": 0.07}, 2: {"a": 0.0, "b": 0.04}}
    assert out["worst_weaker_gain"] == 0.04 and out["worst_stronger_change"] == 0.0
    assert out["target_met_every_seed"] is False  # seed 2's weaker gain 0.04 < 0.05
    runs["sgt"][2] = summary(BEFORE, {"a": 0.31, "b": 0.31})
    assert sgt_gains(runs, roles)["target_met_every_seed"] is False  # stronger -0.01 < 0
    runs["sgt"][2] = summary(BEFORE, {"a": 0.32, "b": 0.31})
    assert sgt_gains(runs, roles)["target_met_every_seed"] is True
    assert sgt_gains({"sgt": runs["sgt"]}, roles) == {}


def test_regime_entry_spreads_over_seeds() -> None:
    entry = regime_entry({1: summary(BEFORE, {"a": 0.2, "b": 0.4}), 3: summary(BEFORE, {"a": 0.4, "b": 0.4})},
                         {"a": "stronger", "b": "weaker"})
    assert entry["seeds"] == [1, 3]
    assert abs(entry["a"]["final_reward@1"]["mean"] - 0.3) < 1e-12
    assert entry["a"]["per_seed"][3]["eval_after"] == 0.4


def test_answer_histogram_by_hand() -> None:
    from learning_real import answer_histogram

    records = [{"extracted": "B", "answer": "B", "score": 1.0}, {"extracted": "B", "answer": "A", "score": 0.0},
               {"extracted": "B", "answer": "A", "score": 0.0}, {"extracted": "C", "answer": "C", "score": 1.0}]
    out = answer_histogram(records)
    assert out["answers"] == {"B": 3, "C": 1} and out["top_answer"] == "B"
    assert out["top_answer_share"] == 0.75 and out["accuracy"] == 0.5
    assert out["constant_ceiling"] == 0.5  # always "A" would score 2 of 4


def test_accuracy_by_group_of_the_task_families() -> None:
    from learning_real import accuracy_by_group

    task = "synthetic-arith-4shot"
    records = [{"task": task, "prompt_id": f"{task}/arith-add-384", "answer": "15", "score": 1.0},
               {"task": task, "prompt_id": f"{task}/arith-add-111", "answer": "3", "score": 0.0},
               {"task": task, "prompt_id": f"{task}/arith-sub-813", "answer": "6", "score": 1.0}]
    assert accuracy_by_group(records) == {"add": 0.5, "sub": 1.0}
    assert accuracy_by_group([{**r, "task": "openbookqa-line"} for r in records]) == {}  # a task without groups


def test_a_saved_run_is_restored_with_its_answers(tmp_path) -> None:
    """--reuse: a run saved by one benchmark (summary, metrics, answer histograms) is rebuilt in another's --out."""
    import json

    from learning_real import restore_run, run_answers, save_run

    run = tmp_path / "a" / "sgt-seed4"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary(BEFORE, BEFORE)))
    (run / "metrics.jsonl").write_text('{"kind": "eval", "policy": "a", "step": 0, "eval/reward@1": 0.3}\n')
    answers = {"a": {"answers_after": {"top_answer": "B"}}, "b": {}}
    save_run(run, tmp_path / "saved", answers)
    target = tmp_path / "b" / "sgt-seed4"
    assert not restore_run(tmp_path / "saved", tmp_path / "b" / "sgt-seed5")  # not saved: train it
    assert restore_run(tmp_path / "saved", target)
    assert (target / "metrics.jsonl").read_text() == (run / "metrics.jsonl").read_text()
    assert json.loads((target / "summary.json").read_text()) == summary(BEFORE, BEFORE)
    assert run_answers(target, "a") == {"answers_after": {"top_answer": "B"}}  # no eval files: the saved ones

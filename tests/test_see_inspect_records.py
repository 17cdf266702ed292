"""``mutualrl see inspect`` says what retention removed, and ``--records N`` shows which peer's answer could rescue
which prompt, with the shard it came from (issue 95)."""

from __future__ import annotations

from pathlib import Path

from mutualrl.ops.exchange_records import record_lines, rescues_at, thresholds
from mutualrl.ops.exchange_retention import retention_note


def row(policy: str, prompt: str, answer: str, reward: float, step: int = 7) -> dict:
    return {"prompt_id": prompt, "prompt_text": f"{prompt}?", "response_text": answer, "reward": reward,
            "policy": policy, "step": step, "model": f"m-{policy}", "tokenizer": f"t-{policy}", "rank": 0,
            "shard": f"step-{step:06d}/{policy}/rank-0-of-1.arrow"}


def test_a_rescue_is_a_prompt_every_learner_sample_failed_and_a_peer_solved():
    rows = {"a": [row("a", "p1", "x", 0.0), row("a", "p1", "y", 0.0), row("a", "p2", "ok", 1.0),
                  row("a", "p3", "z", 0.0), row("a", "p4", "?", float("nan"))],
            "b": [row("b", "p1", "4", 1.0), row("b", "p1", "5", 0.5), row("b", "p2", "no", 0.0),
                  row("b", "p3", "half", 0.5), row("b", "p4", "4", 1.0)]}
    found = rescues_at(rows, success=0.8, failure=0.2)
    assert [(r["learner"], r["prompt_id"], r["peer"], r["answer"], r["samples"]) for r in found] == [
        ("a", "p1", "b", "4", 2),  # p3: the peer's 0.5 is no success; p4: a NaN (not scored) is no failure
        ("b", "p2", "a", "ok", 1)]
    lines = record_lines({"kind": "rescues", "rows": found, "success_threshold": 0.8, "failure_threshold": 0.2})
    assert lines[1:4] == ["  step 7 p1 'p1?'", "    a: 2 of 2 failed, e.g. 'x' (reward 0)",
                          "    rescued by b: '4' (reward 1; model m-b, tokenizer t-b, rank 0: "
                          "step-000007/b/rank-0-of-1.arrow)"]


def test_the_thresholds_are_the_runs_own_sgt_settings(tmp_path: Path):
    assert thresholds(None) == (0.8, 0.2)
    (tmp_path / "config.yaml").write_text("regime:\n  name: sgt\n  sgt:\n    success_threshold: 0.5\n"
                                          "    failure_threshold: 0.1\n")
    assert thresholds(tmp_path) == (0.5, 0.1)


def test_the_steps_line_says_what_retention_deleted(tmp_path: Path):
    assert retention_note(None, [0, 1, 2]) is None
    assert retention_note(None, [43, 44]) == "steps 0..42 not here (deleted by retention, see.retention_steps, or " \
                                             "never written)"
    (tmp_path / "config.yaml").write_text("see:\n  retention_steps: 17\n")
    assert retention_note(tmp_path, list(range(43, 60))) == ("steps 0..42 deleted by retention "
                                                             "(see.retention_steps=17: each policy keeps its last 17 "
                                                             "steps)")
    (tmp_path / "config.yaml").write_text("see:\n  retention_steps: null\n")
    assert "deleted by hand?" in retention_note(tmp_path, [1, 2])

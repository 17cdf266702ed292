"""The dry run's go/no-go (issue 95): before a long run, the pool scores a small sample of the user's rows and the
console says each policy's reward@1, how many of its failures a peer solves, and what that means; and a reward
function training would call with a keyword it does not take is refused by the dry run in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mutualrl.evaluation.complementarity import Outcomes
from mutualrl.evaluation.go_no_go import check_lines, policy_checks, verdict
from mutualrl.launch.pool_check import sample_rows
from test_cli_errors import assert_one_line_error, run_cli, snapshot


def outcomes(columns: list[list[int]]) -> Outcomes:
    scores = np.array(columns, dtype=float).T  # (n_prompts, n_models)
    n = scores.shape[0]
    return Outcomes([f"m{k}" for k in range(len(columns))], [f"p{i}" for i in range(n)], ["t"] * n, scores, 0.5, {})


def test_each_policy_counts_the_failures_some_peer_solves():
    checks = policy_checks(outcomes([[1, 0, 0, 0, 0], [0, 1, 0, 1, 0], [0, 0, 1, 0, 0]]))  # nobody solves p4
    assert [(c.name, c.accuracy, c.failures, c.rescued) for c in checks] == [
        ("m0", 0.2, 4, 3), ("m1", 0.4, 3, 2), ("m2", 0.2, 4, 3)]


@pytest.mark.parametrize("columns,kind", [
    ([[0] * 10, [0] * 10], "nothing-to-learn"),
    ([[1] * 10, [1] * 9 + [0]], "too-easy"),
    ([[1] + [0] * 30 + [1], [0] * 31 + [1]], "little-to-share"),  # the pool: a peer rescues 1 of 31
    ([[1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0]], "worth-a-sweep"),
])
def test_the_verdict_says_what_the_sample_means(columns, kind):
    assert verdict(policy_checks(outcomes(columns))).kind == kind


def test_the_lines_give_each_policy_and_the_rows_the_verdict_rests_on():
    lines = check_lines(policy_checks(outcomes([[1, 1, 0, 0], [0, 0, 1, 1]])), 4, 0.5, "a reward in [0, 1]")
    assert lines[0] == "  m0: reward@1 0.50 (95% interval 0.15 to 0.85); a peer solves 2 of its 2 failures"
    assert lines[-1].startswith("  worth-a-sweep: peers solve 4 of the 4 failures (100%, 95% interval 51% to 100%)")
    assert "(4 rows, greedy, success = reward >= 0.5, a reward in [0, 1]: a rough look" in lines[-1]


def test_the_sample_is_drawn_with_the_seed_in_file_order():
    rows = list(range(100))
    drawn = sample_rows(rows, 10, seed=3)
    assert drawn == sorted(drawn) and len(set(drawn)) == 10 and drawn != rows[:10]
    assert drawn == sample_rows(rows, 10, seed=3)
    assert sample_rows(rows[:5], 10, seed=3) == rows[:5]


REWARDS = '''
import re


def first_int(prompts, completions, completion_ids, answer, **kwargs):
    found = [re.match(r"\\s*(-?\\d+)", c) for c in completions]
    return [1.0 if m is not None and m.group(1) == str(a) else 0.0 for m, a in zip(found, answer)]


def no_kwargs(prompts, completions, completion_ids, answer):
    return [0.0 for _ in completions]
'''


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import sys

    (tmp_path / "gng_rewards.py").write_text(REWARDS)
    (tmp_path / "data").mkdir()
    rows = [{"prompt": f"{a}+{b}+{c}=", "answer": a + b + c} for a, b, c in
            ((i % 10, (3 * i) % 10, (7 * i) % 10) for i in range(40))]
    (tmp_path / "data" / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # the snapshot of the project sees no __pycache__
    yield tmp_path
    sys.modules.pop("gng_rewards", None)


def dry_run(capsys, func: str, *extra: str) -> tuple[int, str, str]:
    from mutualrl.cli.main import run

    code = run(["train", "--dry-run", "-o", "run", "--set", "task.name=dataset", "--set", "task.source=data",
                "--set", f"task.reward_funcs=[gng_rewards.{func}]", *extra])
    captured = capsys.readouterr()
    return code, " ".join(captured.out.split()), captured.err


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_the_dry_run_scores_the_pool_on_the_users_rows_and_writes_only_what_it_is_told(project, capsys):
    code, out, _ = dry_run(capsys, "first_int", "--check-rows", "8", "--check-save", "check.json")
    assert code == 0
    assert "go/no-go: the pool on 8 of data's training rows, before training:" in out
    for policy in ("tiny-bpe", "tiny-sp"):
        assert f"{policy}: reward@1 " in out
    assert any(f"{kind}: " in out for kind in ("nothing-to-learn", "too-easy", "little-to-share", "worth-a-sweep"))
    assert "mutualrl complementarity check.json" in out
    saved = json.loads((project / "check.json").read_text())
    assert [len(r["records"]) for r in saved["results"]] == [8, 8]
    assert not (project / "run").exists()
    from mutualrl.cli.main import run

    assert run(["complementarity", "check.json"]) == 0  # the file it names opens as it says


def test_check_rows_0_skips_it_and_the_options_need_a_dry_run(project, capsys):
    code, out, _ = dry_run(capsys, "first_int", "--check-rows", "0")
    assert code == 0 and "go/no-go" not in out
    code, err = run_cli(["train", "-o", "run", "--check-rows", "4"], capsys)
    assert_one_line_error(code, err, "--check-rows: the go/no-go runs with --dry-run")


def test_a_reward_without_kwargs_is_refused_by_the_dry_run_in_one_line(project, capsys):
    before = snapshot(project)
    code, err = run_cli(["train", "--dry-run", "-o", "run", "--set", "task.name=dataset", "--set",
                         "task.source=data", "--set", "task.reward_funcs=[gng_rewards.no_kwargs]"], capsys)
    assert_one_line_error(code, err, "task.reward_funcs[0] gng_rewards.no_kwargs: takes no **kwargs",
                          "trainer_state", "end its signature with **kwargs")
    assert snapshot(project) == before


def test_the_check_loads_no_model_a_planned_machine_or_a_cpu_should_not(monkeypatch: pytest.MonkeyPatch):
    import dataclasses

    import torch

    from mutualrl.config.loader import load_run_config
    from mutualrl.launch.pool_check import elsewhere

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    tiny, paper = load_run_config("tiny").config, load_run_config("2qwen").config
    assert elsewhere(tiny, asked=False) is None  # two tiny models: seconds on a CPU
    assert "not on this machine" in elsewhere(paper, asked=False)  # a dry run downloads nothing
    assert elsewhere(paper, asked=True) is None  # --check-rows N: scored here anyway
    simulated = dataclasses.replace(tiny, launch=dataclasses.replace(tiny.launch, gpus=8))
    assert elsewhere(simulated, asked=True) == "--gpus 8 plans another machine (this one has 0)"

"""Dry runs as strict as runs (issue 39): what a real run refuses before its first step, ``--dry-run`` refuses
with the same message; a tracker that is not installed is a dry run's warning and a run's error; the plan
says its files "would be written"; a real run refused before it starts leaves no run folder behind."""

from __future__ import annotations

import pytest

from test_cli_errors import assert_one_line_error, run_cli, snapshot


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


REFUSED = [
    (["--set", "task.source=x.jsonl"], ["generates its problems", "task.name=dataset"]),
    (["--set", "grpo.deepspeed=ds.json"], ["grpo.deepspeed", "launch.deepspeed"]),
    (["--set", "task.name=dataset"], ["needs task.source"]),
    (["--set", "task.name=dataset", "--set", "task.source=a.jsonl"], ["task.source", "neither an existing file"]),
    (["--set", "task.reward_funcs=[no_such_module.fn]"], ["task.reward_funcs[0]", "no_such_module"]),
    (["--set", "plugins=[no_such_plugin]"], ["plugins[0]", "no_such_plugin"]),
    (["--set", "grpo.reward_weights=[1.0, 2.0]"], ["grpo.reward_weights", "2 weight(s) for 1 reward function(s)"]),
]


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("args,needles", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_a_dry_run_refuses_what_a_run_refuses(workdir, capsys, args, needles, dry):
    before = snapshot(workdir)
    code, err = run_cli(["train", *args, "-o", "run", *(["--dry-run"] if dry else [])], capsys)
    assert_one_line_error(code, err, *needles, exit_code=code)
    assert code != 0 and snapshot(workdir) == before


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_the_plan_says_its_files_would_be_written_and_states_the_held_out_rows(workdir, capsys):
    from mutualrl.cli.main import run

    (workdir / "rows.jsonl").write_text("".join(f'{{"prompt": "{i}+1=", "answer": {i + 1}}}\n' for i in range(20)))
    assert run(["train", "--dry-run", "-o", "run", "--set", "task.name=dataset", "--set", "task.source=rows.jsonl",
                "--set", "task.reward_funcs=[think_format_reward]", "--set", "task.split_seed=3"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Config files (would be written by the run)" in out and "(written)" not in out
    assert "held-out: 0.1 of split 'train', drawn with task.split_seed=3; reward: think_format_reward" in out
    assert not (workdir / "run").exists()


def test_a_missing_tracker_warns_in_a_dry_run_and_a_refused_run_leaves_no_folder(workdir, capsys, monkeypatch):
    import sys

    from mutualrl.cli.main import run

    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed, whatever this machine has: import fails

    assert run(["train", "--dry-run", "-o", "run", "--set", "grpo.report_to=[wandb]"]) == 0
    out = capsys.readouterr().out
    assert "Warnings" in out and "wandb" in out
    code = run(["train", "-o", "run", "--set", "grpo.report_to=[wandb]", "--max-steps", "1"])
    err = capsys.readouterr().err
    assert code != 0 and "wandb" in err
    assert not (workdir / "run").exists()  # refused after preparing: the half-made folder is gone

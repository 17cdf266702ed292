"""``mutualrl train --dry-run`` reads a local dataset's rows as the launch does before it starts any worker: a row the
launch refuses (no ``prompt``, a column changing type, a prompt over ``task.max_prompt_chars``) is the same one-line
error, naming the file, the row and the column, at the dry run, and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_cli_errors import assert_one_line_error, run_cli, snapshot


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_rows(folder: Path, rows: list[dict]) -> None:
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def train(capsys, dry: bool, *extra: str) -> tuple[int, str]:
    return run_cli(["train", *(["--dry-run"] if dry else []), "-o", "run", "--set", "task.name=dataset", "--set",
                    "task.source=data", "--set", "task.reward_funcs=[think_format_reward]", *extra], capsys)


GOOD = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(12)]
BAD = [
    ("no prompt", GOOD[:3] + [{"question": "3+1=", "answer": "4"}] + GOOD[4:], (),
     ["train.jsonl: row 3 has no field 'prompt'"]),
    ("type change", GOOD[:5] + [{"prompt": "5+1=", "answer": 6}] + GOOD[6:], (),
     ["train.jsonl: row 5, column 'answer': holds number, but row 0 holds text"]),
    ("too long", GOOD[:7] + [{"prompt": "x" * 60, "answer": "0"}] + GOOD[8:], ("--set", "task.max_prompt_chars=50"),
     ["train.jsonl: row 7, column 'prompt': 60 characters", "task.max_prompt_chars=50"]),
]


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("rows,extra,needles", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_a_bad_row_fails_the_dry_run_as_the_run_in_one_line(workdir, capsys, rows, extra, needles, dry):
    write_rows(workdir / "data", rows)
    before = snapshot(workdir)
    code, err = train(capsys, dry, *extra)
    assert code != 0
    assert_one_line_error(code, err, *needles, exit_code=code)
    assert snapshot(workdir) == before


@pytest.mark.slow
def test_good_rows_pass_the_dry_run_and_it_says_they_were_checked(workdir, capsys):
    write_rows(workdir / "data", GOOD)
    from mutualrl.cli.main import run

    assert run(["train", "--dry-run", "-o", "run", "--set", "task.name=dataset", "--set", "task.source=data",
                "--set", "task.reward_funcs=[think_format_reward]", "--set", "task.max_prompt_chars=50"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "rows of data: 11 train, 1 held-out, each checked as the launch reads them" in out  # 0.1 of 12 held out
    assert not (workdir / "run").exists()

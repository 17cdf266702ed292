"""No command destroys finished work it was not told to: an existing output (``eval``'s results and the ``.md``
beside them, ``--save-plan``) is refused without ``--overwrite`` before any work; names derived from inputs stay
within a file name's bytes; a path too long for the filesystem is one line, never a double traceback; zero models
is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutualrl.cli.main import run


def one_line_error(code: int, err: str, *needles: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in err, (code, err)
    for needle in needles:
        assert needle in lines[0], err


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("existing, output", [("README.md", "README.json"), ("config.yaml", "config.yaml"),
                                              ("res.json", "res.json")])
def test_eval_refuses_an_existing_output_before_any_model_loads(workdir: Path, capsys, existing, output) -> None:
    (workdir / existing).write_text("finished work\n")
    code = run(["eval", "builtin:tiny-bpe", "--suite", "synthetic-arith", "-o", output])
    one_line_error(code, capsys.readouterr().err, "exists", "--overwrite")
    assert (workdir / existing).read_text() == "finished work\n"


def test_an_output_whose_table_would_be_itself_is_refused(workdir: Path, capsys) -> None:
    code = run(["eval", "builtin:tiny-bpe", "--suite", "synthetic-arith", "-o", "results.md"])
    one_line_error(code, capsys.readouterr().err, "markdown table")


@pytest.mark.parametrize("target", [",,,", " , "])
def test_eval_of_zero_models_is_an_error(workdir: Path, capsys, target: str) -> None:
    code = run(["eval", target, "--suite", "synthetic-arith"])
    one_line_error(code, capsys.readouterr().err, "no model")
    assert not (workdir / "eval-results").exists()


def test_the_default_result_name_is_bounded_and_never_an_existing_file(workdir: Path) -> None:
    from mutualrl.cli.eval_cmd import default_output

    long = default_output("r" * 240 + "é" * 10, "synthetic-arith")
    assert len(long.name.encode()) <= 200 and long.name.endswith(".json")  # a file name may have 255 bytes
    first = default_output("run", "math")
    first.parent.mkdir(exist_ok=True)
    first.with_suffix(".md").write_text("a table")
    assert default_output("run", "math") != first


@pytest.mark.parametrize("argv", [["eval", "builtin:tiny-bpe", "-o", "x" * 300 + ".json"],
                                  ["eval", "r" * 300], ["see", "inspect", "s" * 300],
                                  ["train", "--dry-run", "-o", "d" * 300],
                                  ["train", "--dry-run", "--save-plan", "p/" * 2100 + "plan.json"]])
def test_a_path_too_long_for_the_filesystem_is_one_line(workdir: Path, capsys, argv: list[str]) -> None:
    code = run(argv)
    one_line_error(code, capsys.readouterr().err, "choose a shorter one")  # never the handler's own traceback


def test_save_plan_refuses_an_existing_file(workdir: Path, capsys) -> None:
    (workdir / "plan.json").write_text("kept")
    code = run(["train", "--dry-run", "--save-plan", "plan.json"])
    one_line_error(code, capsys.readouterr().err, "exists")
    assert (workdir / "plan.json").read_text() == "kept"

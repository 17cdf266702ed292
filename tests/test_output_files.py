"""One write rule for every command that writes (issue 68, ``mutualrl.output_guards``): a link planted where a
command's file or folder goes (pointing outside) gets nothing written through it, exit 2 in one line; an existing
file there is refused without ``--overwrite``; with it, a link is replaced, its target untouched. In process, on
finished-run fakes (``report_fakes``): no model loads, nothing trains."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from report_fakes import write_sweep

from mutualrl.cli.main import run
from mutualrl.config.loader import load_run_config
from mutualrl.config.typed import to_plain

SCORES = {"standalone": [[1, 0, 0, 0]], "sgt": [[1, 1, 0, 0]]}
USERS_FILE = "the user's own file\n"


@dataclass
class Case:
    """A command's argv, where its output goes (``target``, a file or a folder) and what it does with the
    folders of the fake sweep ``SW`` in ``tmp_path`` (``prepare``)."""

    argv: Callable[[Path], list[str]]
    target: Callable[[Path], Path]
    folder: bool = False  # the target is a folder: a link to a folder is planted there
    replaces: bool = True  # has a file of its own to refuse without --overwrite and to replace with it
    prepare: Callable[[Path], None] = lambda tmp: None


def finished_distill_run(tmp: Path) -> None:
    """The standalone run as distill reads it: the tiny pool's full config and the learner's final model folder."""
    run_dir = tmp / "SW" / "standalone-seed1"
    config = load_run_config("tiny", regime="standalone").config
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_plain(config)))
    (run_dir / "policies" / "tiny-bpe" / "final").mkdir(parents=True)


def step_files(tmp: Path) -> list[str]:
    return [str(tmp / "SW" / "sgt-seed1" / "eval" / p / "step-000003.json") for p in ("tiny-bpe", "tiny-sp")]


CASES = {
    "plot -o": Case(lambda t: ["plot", str(t / "SW" / "sgt-seed1"), "-o", str(t / "out")],
                    lambda t: t / "out" / "validation_reward.png"),
    "plot --group-by -o": Case(lambda t: ["plot", "--group-by", "regime", str(t / "SW"), "-o", str(t / "out")],
                               lambda t: t / "out" / "heldout_reward_by_regime.caption.txt"),
    "plot (the run's plots/)": Case(lambda t: ["plot", str(t / "SW" / "sgt-seed1")],
                                    lambda t: t / "SW" / "sgt-seed1" / "plots", folder=True, replaces=False),
    "report -o": Case(lambda t: ["report", str(t / "SW"), "-f", "markdown", "-o", str(t / "out" / "table.md")],
                      lambda t: t / "out" / "table.md"),
    "sweep (a run folder)": Case(lambda t: ["sweep", "-o", str(t / "SW"), "--regimes", "standalone", "--seeds", "2",
                                            "--pool", "tiny", "--dry-run"],
                                 lambda t: t / "SW" / "standalone-seed2", folder=True, replaces=False),
    "sweep (a run's log)": Case(lambda t: ["sweep", "-o", str(t / "SW"), "--regimes", "standalone", "--seeds", "2",
                                           "--pool", "tiny", "--dry-run"],
                                lambda t: t / "SW" / "logs" / "standalone-seed2.log", replaces=False),
    "eval -o": Case(lambda t: ["eval", str(t / "SW" / "sgt-seed1"), "-o", str(t / "out" / "ev.json")],
                    lambda t: t / "out" / "ev.json", replaces=False),  # replacing needs a model to run
    "complementarity --out": Case(lambda t: ["complementarity", *step_files(t), "--out", str(t / "out" / "c.json")],
                                  lambda t: t / "out" / "c.json"),
    "eval (the working directory's eval-results/)": Case(lambda t: ["eval", str(t / "SW" / "sgt-seed1")],
                                                         lambda t: t / "eval-results", folder=True, replaces=False),
    "sweep --slurm (its slurm/)": Case(lambda t: ["sweep", "-o", str(t / "SW"), "--regimes", "standalone", "--seeds",
                                                  "2", "--pool", "tiny", "--slurm", "--slurm-local", "--dry-run"],
                                       lambda t: t / "SW" / "slurm", folder=True, replaces=False),
    "distill (RUN/distill)": Case(lambda t: ["distill", str(t / "SW" / "standalone-seed1"), "--learner", "tiny-bpe"],
                                  lambda t: t / "SW" / "standalone-seed1" / "distill", folder=True, replaces=False,
                                  prepare=finished_distill_run),
}


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the working directory, where eval's default results folder is
    write_sweep(tmp_path / "SW", SCORES)
    (tmp_path / "out").mkdir()
    return tmp_path


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in err, err
    return lines[0]


SLOW = {"distill (RUN/distill)"}  # distill imports transformers before its checks: 6 s when nothing else has


@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else [])
                                  for name in CASES])
def test_a_link_planted_where_a_command_writes_is_refused_and_nothing_leaves_the_folder(
        name: str, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES[name]
    case.prepare(tmp)
    outside = tmp / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text(USERS_FILE)
    target = case.target(tmp)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(outside if case.folder else victim)
    code = run(case.argv(tmp))
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and str(target.name) in line and ("a link" in line or "exists; pass --overwrite" in line)
    assert [p.name for p in outside.iterdir()] == ["victim"] and victim.read_text() == USERS_FILE


@pytest.mark.slow  # over 2 s: outside the fast tier
@pytest.mark.parametrize("name", [name for name, case in CASES.items() if case.replaces])
def test_an_existing_file_is_replaced_only_with_overwrite_and_a_link_never_followed(
        name: str, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES[name]
    target = case.target(tmp)
    target.write_text(USERS_FILE)
    assert run(case.argv(tmp)) == 2
    assert "exists; pass --overwrite" in one_error_line(capsys.readouterr().err)
    assert target.read_text() == USERS_FILE
    target.unlink()
    victim = tmp / "victim"
    victim.write_text(USERS_FILE)
    target.symlink_to(victim)
    assert run([*case.argv(tmp), "--overwrite"]) == 0, capsys.readouterr().err
    assert victim.read_text() == USERS_FILE and not target.is_symlink() and target.stat().st_size > 0

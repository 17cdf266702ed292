"""README.md's first commands and quick tour are run as written: every command of their shell blocks, in order,
in one folder (a user reading on from the set-up into the tour, whose ``--baseline`` line then uses the runs the
set-up made as they are).

The blocks are the documentation; this test reads them and runs each line with bash (so globs and quoting are
the shell's), ``mutualrl`` being this tree's CLI. Only the length of training differs from a user's run:
the recipes folder (``MUTUALRL_RECIPES``) holds the shipped recipes with ``tiny`` cut to 2 steps and 20
held-out prompts, so the whole tour takes a few minutes on a CPU; and a train line whose run the suite trains
elsewhere runs as its dry run (:func:`planned_only`). A renamed option, a run folder the tour never made, a
command that needs the hub: the test fails on that line.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml

from e2e_helpers import ROOT, child_env
from mutualrl.cli.main import app

TOUR_HEADING = "## A quick tour"
FIRST_HEADING = "## Set up and run"
SHORT_TINY = {"grpo": {"max_steps": 2, "save_steps": 1}, "validation": {"every_steps": 0, "limit": 20}}
"""What the test's ``tiny`` recipe changes: 2 steps (a checkpoint each, for ``--resume``), 20 held-out prompts."""


def planned_only(line: str) -> bool:
    """A tour line run as its dry run (``--dry-run`` added: the same command, its plan printed, nothing trained):
    a variant of a run the suite trains elsewhere (the shared 2-step xgrpo and naive-PRP runs of
    tests/conftest.py, the asynchronous settings of tests/test_async_exchange_e2e.py) or a setting whose plan is
    its check (a learning rate and a per-policy temperature: resolved and planned, not trained). Every other train line trains: the set-up's SGT run and its baseline, the
    resume, and the recorded run that distill reads."""
    return line.startswith("mutualrl train ") and any(mark in line for mark in DRY_RUN_MARKS)


DRY_RUN_MARKS = ("--regime xgrpo", "--prp-denominator learner", "-o runs/tiny-lr", "-o runs/tiny-async")


def as_run(line: str) -> str:
    """The line as the test runs it: a planned-only train line with ``--dry-run`` after ``train``."""
    return line.replace("mutualrl train ", "mutualrl train --dry-run ", 1) if planned_only(line) else line


def tour_lines(readme: str) -> list[str]:
    """The quick tour's command lines: the first ``bash`` block under its heading, a trailing ``\\`` joining
    lines, comment-only lines dropped (a comment after a command stays: bash ignores it)."""
    section = readme[readme.index(TOUR_HEADING):]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, f"README.md: no ```bash block under {TOUR_HEADING!r}"
    joined = re.sub(r"\s*\\\n\s*", " ", block.group(1))
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def readme_tour() -> list[str]:
    return tour_lines((ROOT / "README.md").read_text())


def test_the_tour_is_read_whole():
    lines = readme_tour()
    assert as_run("mutualrl train --pool tiny --regime xgrpo   # c") == (
        "mutualrl train --dry-run --pool tiny --regime xgrpo   # c")  # before the comment, where bash reads it
    assert len(lines) >= 20, lines
    assert all(line.startswith("mutualrl ") for line in lines), [x for x in lines if not x.startswith("mutualrl ")]
    assert tour_lines("## A quick tour\n\n```bash\nmutualrl a \\\n  --b 1   # c\n# d\n\nmutualrl e\n```\n") == [
        "mutualrl a --b 1   # c", "mutualrl e"]


def parsed_command(argv: list[str]):
    """Parse ``argv`` down to its subcommand as the CLI would, running nothing."""
    command = typer.main.get_command(app)
    ctx = command.make_context("mutualrl", list(argv))
    while hasattr(command, "resolve_command") and [*ctx._protected_args, *ctx.args]:  # a group (typer's click)
        name, command, rest = command.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
        ctx = command.make_context(name, rest, parent=ctx)
    return ctx


@pytest.mark.parametrize("line", readme_tour(), ids=lambda line: shlex.join(shlex.split(line, comments=True)[1:3]))
def test_each_tour_command_parses(line):
    """Fast: every tour command names a subcommand and options the CLI has (the slow test runs them)."""
    words = shlex.split(line, comments=True)
    assert words[0] == "mutualrl"
    parsed_command(words[1:])


def test_a_renamed_option_would_fail():
    with pytest.raises(Exception, match="No such option: --prp-denominatr") as err:
        parsed_command(["train", "--prp-denominatr", "learner"])
    assert type(err.value).__name__ == "NoSuchOption"
    with pytest.raises(Exception, match="No such command"):
        parsed_command(["see", "inspekt", "runs/x"])


def short_recipes(folder: Path) -> Path:
    """The shipped recipes with ``tiny`` cut short (:data:`SHORT_TINY`)."""
    shutil.copytree(ROOT / "recipes", folder)
    path = folder / "pools" / "tiny.yaml"
    recipe = yaml.safe_load(path.read_text())
    for section, values in SHORT_TINY.items():
        recipe[section].update(values)
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return folder


def first_commands(readme: str) -> list[str]:
    """The command lines of the bash blocks of the README's first section, in order (what a new user types
    first), comments dropped by bash."""
    section = readme[readme.index(FIRST_HEADING):]
    section = section[:section.index("\n## ", len(FIRST_HEADING))]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [line.strip() for block in blocks for line in block.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def write_shim(path: Path) -> None:
    """An executable ``mutualrl`` at ``path`` that runs this tree's CLI with this Python."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m mutualrl "$@"\n')
    path.chmod(0o755)


def tour_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a tour command: this tree's CLI first on PATH, the shortened recipes."""
    write_shim(tmp_path / "bin" / "mutualrl")
    env = child_env()
    env.update(PATH=f"{tmp_path / 'bin'}:{env.get('PATH', '')}",
               MUTUALRL_RECIPES=str(short_recipes(tmp_path / "recipes")), COLUMNS="120")
    return {k: v for k, v in env.items() if not k.startswith("MUTUALRL_DEBUG")}


def test_the_first_commands_are_read():
    lines = first_commands((ROOT / "README.md").read_text())
    assert lines[0] == "./setup.sh && .venv/bin/mutualrl train", lines
    assert [line.split("#")[0].split()[:3] for line in lines[1:3]] == [
        [".venv/bin/mutualrl", "train", "--baseline"], [".venv/bin/mutualrl", "plot", "runs/tiny-sgt"]], lines


def run_as_written(lines: list[str], work: Path, env: dict[str, str], where: str) -> list[str]:
    """Run each line with bash in ``work``, in order; fail on the first that fails. Each line's stdout."""
    said = []
    for line in lines:
        done = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{where}: `{line}` failed\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        said.append(done.stdout)
    return said


def fresh_clone(tmp_path: Path) -> Path:
    """A fresh clone's folder: the set-up done (this venv; ``./setup.sh`` stands in for it), ``.venv/bin/mutualrl``."""
    work = tmp_path / "clone"
    work.mkdir()
    (work / "setup.sh").write_text("#!/bin/sh\nexit 0\n")
    (work / "setup.sh").chmod(0o755)
    write_shim(work / ".venv" / "bin" / "mutualrl")
    return work


@pytest.mark.slow
def test_the_readme_runs_as_written_in_order(tmp_path):
    """The README read top to bottom in one clone, every line as written.

    First the set-up section: the set-up, the demonstration, its baseline (the finished SGT run is used as it
    is, and the console says so) and the plot. Then the quick tour in the same folder, as a user reading on
    would: its ``train --baseline standalone`` finds both runs finished with the same settings and uses them
    as they are (the test checks it says so: one launch serving both sections, not two trainings of each)."""
    work = fresh_clone(tmp_path)
    env = tour_env(tmp_path)
    said = run_as_written(first_commands((ROOT / "README.md").read_text()), work, env, "README")
    assert "using it as it is, not training it again" in said[1] and "baseline:" in said[1], said[1][-2000:]
    assert (work / "runs" / "tiny-sgt-standalone" / "summary.json").is_file()
    assert (work / "runs" / "tiny-sgt" / "comparison.json").is_file()
    assert list((work / "runs" / "tiny-sgt" / "plots").glob("*.png"))

    tour = readme_tour()
    assert sum(map(planned_only, tour)) == len(DRY_RUN_MARKS), [line for line in tour if planned_only(line)]
    said = run_as_written([as_run(line) for line in tour], work, env, "README quick tour")
    baseline = said[next(i for i, line in enumerate(tour) if "--baseline standalone" in line)]
    assert baseline.count("using it as it is, not training it again") == 2, baseline[-2000:]
    for line, out in zip(tour, said):
        if planned_only(line):  # the plan of the pool and regime the line names
            assert "Launch plan pool tiny, regime " in out, f"`{line}` printed no plan\n{out[-2000:]}"
    runs = {p.name for p in (work / "runs").iterdir()}
    assert {"tiny-sgt", "tiny-sgt-standalone", "tiny-recorded"} <= runs, runs
    assert not {"tiny-xgrpo", "tiny-prp", "tiny-lr", "tiny-async"} & runs, runs  # planned, nothing written
    assert list((work / "runs" / "tiny-sgt" / "plots").glob("*.png"))
    assert (work / "runs" / "tiny-recorded" / "distill" / "tiny-bpe-from-tiny-sp" / "summary.json").is_file()

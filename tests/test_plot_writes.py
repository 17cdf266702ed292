"""What `mutualrl plot` writes stays inside the folder it writes to (issue 68): a link planted in a run's or a
sweep's ``plots/`` is replaced, never written through, a link at ``plots/`` itself is refused; ``-o DIR`` replaces
a figure only with ``--overwrite``; a failed write (full disk) is one line and leaves no 0-byte figure."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from report_fakes import write_sweep
from typer.testing import CliRunner

from mutualrl.cli.main import app

SCORES = {"standalone": [[1, 0, 0, 0], [0, 1, 0, 0]], "sgt": [[1, 1, 0, 0], [1, 1, 1, 0]]}


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return write_sweep(tmp_path / "sw", SCORES)


def plant(link: Path, target: Path) -> None:
    target.write_text("the user's own file\n")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def one_line(output: str) -> str:
    return " ".join(output.split())


@pytest.mark.slow
def test_links_planted_in_a_sweeps_figure_folder_are_replaced_not_followed(sweep: Path, tmp_path: Path) -> None:
    figure = sweep / "plots" / "heldout_reward_by_regime.pdf"
    caption = figure.with_suffix(".caption.txt")
    plant(figure, tmp_path / "victim.pdf")
    plant(caption, tmp_path / "victim.txt")
    done = CliRunner().invoke(app, ["plot", "--group-by", "regime", str(sweep)])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "victim.pdf").read_text() == (tmp_path / "victim.txt").read_text() == "the user's own file\n"
    assert not figure.is_symlink() and figure.read_bytes().startswith(b"%PDF")
    assert not caption.is_symlink() and "Held-out reward@1" in caption.read_text()


@pytest.mark.slow
def test_a_link_planted_in_a_runs_plots_folder_is_replaced_not_followed(sweep: Path, tmp_path: Path) -> None:
    run = sweep / "sgt-seed1"
    plant(run / "plots" / "validation_reward.png", tmp_path / "victim.png")
    done = CliRunner().invoke(app, ["plot", str(run)])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "victim.png").read_text() == "the user's own file\n"
    assert (run / "plots" / "validation_reward.png").read_bytes().startswith(b"\x89PNG")


def test_a_link_at_the_plots_folder_itself_is_refused_in_one_line(sweep: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (sweep / "plots").symlink_to(elsewhere)
    for args in (["plot", str(sweep / "sgt-seed1")], ["plot", "--group-by", "regime", str(sweep)]):
        if args[-1] != str(sweep):
            (sweep / "sgt-seed1" / "plots").symlink_to(elsewhere)
        done = CliRunner().invoke(app, args)
        assert done.exit_code == 2, done.output
        assert "plots: a link" in one_line(done.output) and "Traceback" not in done.output
    assert list(elsewhere.iterdir()) == []


def test_plot_out_replaces_a_file_only_with_overwrite(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "paper"
    out.mkdir()
    mine = out / "heldout_reward_by_regime.caption.txt"
    mine.write_text("my caption, edited by hand\n")
    args = ["plot", "--group-by", "regime", str(sweep), "-o", str(out)]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 2 and "exists; pass --overwrite" in one_line(done.output)
    assert str(mine) in one_line(done.output) and mine.read_text() == "my caption, edited by hand\n"
    assert not (out / "heldout_reward_by_regime.pdf").exists()  # refused before anything was drawn
    done = CliRunner().invoke(app, [*args, "--overwrite"])
    assert done.exit_code == 0, done.output
    assert "Held-out" in mine.read_text()


def test_plot_out_refuses_an_existing_figure_of_the_run_plots(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "figs"
    out.mkdir()
    (out / "validation_reward.png").write_text("a figure of mine")
    done = CliRunner().invoke(app, ["plot", str(sweep / "sgt-seed1"), "-o", str(out)])
    assert done.exit_code == 2 and "validation_reward.png: exists" in one_line(done.output)
    assert (out / "validation_reward.png").read_text() == "a figure of mine"


@pytest.mark.slow
def test_a_figure_that_cannot_be_written_is_one_line_and_leaves_no_file(sweep: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write

    def full(fd: int, data: bytes) -> int:
        if "heldout_reward" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    done = CliRunner().invoke(app, ["plot", "--group-by", "regime", str(sweep)])
    assert done.exit_code == 1, done.output
    assert one_line(done.output).startswith("error: no space left on") and "Traceback" not in done.output
    assert [p.name for p in (sweep / "plots").iterdir()] == []  # no 0-byte figure, no temporary file

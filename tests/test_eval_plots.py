"""`mutualrl plot`: figures from fixture run folders (metrics.jsonl + run.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from run_fixtures import write_run
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.errors import DataError
from mutualrl.evaluation.plots import load_run, mean_series, plot_runs, series, summary_rows

ALL_FIGURES = {"validation_reward.png", "validation_reward_by_task.png", "training_reward.png", "optimization.png",
               "regime_metrics.png"}


@pytest.fixture
def runs(tmp_path: Path) -> list[Path]:
    return [write_run(tmp_path / regime, regime, seed=i, steps=12) for i, regime in
            enumerate(("standalone", "xgrpo", "sgt"))]


def assert_png(path: Path, min_width: int = 600) -> None:
    with Image.open(path) as img:
        assert img.format == "PNG"
        assert img.width >= min_width and img.height >= 300
        # Not a blank canvas: a plot has many distinct colours (lines, text, grid).
        assert len(img.convert("RGB").getcolors(maxcolors=1 << 20) or []) > 50


def test_plot_runs_writes_every_figure(runs: list[Path], tmp_path: Path) -> None:
    written = plot_runs(runs, tmp_path / "plots")
    assert {p.name for p in written} == ALL_FIGURES
    for path in written:
        assert_png(path)


def test_figures_depend_on_available_metrics(runs: list[Path], tmp_path: Path) -> None:
    # Without the SGT run there are no regime metrics; a single-task run has no per-task figure.
    single = write_run(tmp_path / "single", "standalone", steps=6, tasks=("math",))
    names = {p.name for p in plot_runs([runs[0], single], tmp_path / "p1")}
    assert names == {"validation_reward.png", "validation_reward_by_task.png", "training_reward.png",
                     "optimization.png"}
    names = {p.name for p in plot_runs([single], tmp_path / "p2")}
    assert "validation_reward_by_task.png" not in names and "regime_metrics.png" not in names


def test_series_and_averages(runs: list[Path]) -> None:
    run = load_run(runs[2])
    assert run.regime == "sgt" and run.policies() == ["qwen-a", "qwen-b"]
    steps, values = series(run.evals, "qwen-a", "eval/reward@1")
    assert steps == [0, 5, 10] and len(values) == 3
    a = dict(zip(*series(run.evals, "qwen-a", "eval/reward@1"), strict=True))
    b = dict(zip(*series(run.evals, "qwen-b", "eval/reward@1"), strict=True))
    msteps, mvalues = mean_series(run.evals, run.policies(), "eval/reward@1")
    assert msteps == [0, 5, 10]
    assert mvalues == pytest.approx([(a[s] + b[s]) / 2 for s in msteps])
    gate_steps, _ = series(run.train, "qwen-b", "sgt/gate_rate")
    assert gate_steps == list(range(1, 13))


def test_truncated_last_line_is_skipped_but_corruption_is_an_error(tmp_path: Path) -> None:
    run = write_run(tmp_path / "live", "sgt", steps=4, truncated_tail=True)
    with pytest.warns(UserWarning, match="truncated last line"):
        data = load_run(run)
    assert len(data.train) == 8
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines.insert(2, "{broken")
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="line 3 is not valid JSON"):
        load_run(run)
    with pytest.raises(DataError, match="no metrics.jsonl"):
        load_run(tmp_path)


def test_plot_cli(runs: list[Path], tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["plot", *map(str, runs)])
    assert res.exit_code == 0, res.output
    plots = runs[0] / "plots"
    assert {p.name for p in plots.glob("*.png")} == ALL_FIGURES
    assert "standalone" in res.output and "sgt" in res.output and "wrote" in res.output
    rows = summary_rows(runs)
    first = next(r for r in rows if r["run"] == "sgt" and r["policy"] == "qwen-b")
    evals = [json.loads(line) for line in (runs[2] / "metrics.jsonl").read_text().splitlines()]
    final = [e for e in evals if e["kind"] == "eval" and e["policy"] == "qwen-b"][-1]
    assert first["final_step"] == 10 and first["final"] == pytest.approx(final["eval/reward@1"])
    res = runner.invoke(app, ["plot", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "no metrics.jsonl" in " ".join(res.output.split())


def test_runs_with_task_groups_get_a_per_group_figure_and_no_task_figure(tmp_path: Path) -> None:
    runs = [write_run(tmp_path / r, r, seed=i, steps=12, pool="tiny", tasks=("synthetic-arith",),
                      groups=("add", "sub")) for i, r in enumerate(("standalone", "sgt"))]
    written = {p.name: p for p in plot_runs(runs, tmp_path / "plots")}
    assert "validation_reward_by_group.png" in written and "validation_reward_by_task.png" not in written
    assert_png(written["validation_reward_by_group.png"])

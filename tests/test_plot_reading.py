"""`mutualrl plot` figures that do not mislead (issue 49, item 7): y ranges shared by the panels of one quantity
(rewards and shares on 0-1, an all-zero reward not drawn with ticks of ±0.04), one meaning per line style in
every figure (the run), titles and y labels in words, the mean over policies named, and runs of different
pools or tasks refused unless --allow-mixed.

Each figure's axes are read where it is saved (``save_with_legend``), before the PNG is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_eval_plots import write_run
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.errors import DataError
from mutualrl.evaluation import plots


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What each figure of plot_runs shows, by file name; read where it would be saved, and not saved (a PNG at
    120 dpi is most of a figure's time; test_eval_plots checks the files)."""
    from mutualrl.evaluation.plot_style import pyplot

    seen: dict[str, dict[str, Any]] = {}

    def keep(fig: Any, entries: Any, out: Path) -> Path:
        axes = [ax for ax in fig.axes if ax.get_visible()]
        seen[out.name] = {
            "axes": [{"title": ax.get_title(), "ylabel": ax.get_ylabel(), "ylim": ax.get_ylim(),
                      "lines": [style_of(line) for line in ax.lines if line.get_alpha() is None]} for ax in axes],
            "legend": {label: style_of_kwargs(kwargs) for label, kwargs in entries},
        }
        pyplot().close(fig)
        return out

    monkeypatch.setattr(plots, "save_with_legend", keep)
    return seen


def style_of(line: Any) -> tuple[Any, ...]:
    """Colour, dash pattern and marker (None where the figure draws none, as training_reward.png does)."""
    marker = line.get_marker()
    return (tuple(round(c, 3) for c in line.get_color()), str(line.get_linestyle()),
            None if marker in (None, "None", "") else marker)


def same_style(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return a[:2] == b[:2] and (a[2] is None or b[2] is None or a[2] == b[2])


def style_of_kwargs(kwargs: dict[str, Any]) -> tuple[Any, ...]:
    from matplotlib.lines import Line2D

    return style_of(Line2D([], [], **kwargs))


def edit_rows(run: Path, change: Any) -> None:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        change(row)
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def drawn(figure: dict[str, Any]) -> list[dict[str, Any]]:
    return [ax for ax in figure["axes"] if ax["lines"]]


def test_rewards_and_shares_are_drawn_on_0_to_1_in_every_panel(tmp_path: Path, figures: dict[str, Any]) -> None:
    """A 0.05 move is a small move on 0-1, not a V filling the panel; an all-zero group is a line on 0, not a
    line between ticks of ±0.04; every panel of one figure has the same range."""
    runs = [write_run(tmp_path / r, r, seed=i, steps=6, eval_every=3, tasks=("synthetic-arith",),
                      groups=("add", "sub")) for i, r in enumerate(("standalone", "sgt"))]
    for run in runs:  # a group no policy ever solves: every value 0
        edit_rows(run, lambda row: row.update({"eval/group/sub/reward@1": 0.0}) if row["kind"] == "eval" else None)
    plots.plot_runs(runs, tmp_path / "plots")
    for name in ("validation_reward.png", "validation_reward_by_group.png", "training_reward.png"):
        limits = {ax["ylim"] for ax in drawn(figures[name])}
        assert len(limits) == 1, (name, limits)
        (low, high), = limits
        assert -0.06 < low <= 0 and 1 <= high < 1.06, (name, low, high)
    rates = [ax for ax in drawn(figures["regime_metrics.png"]) if "gate rate" in ax["title"]]
    assert len(rates) == 2 and all(-0.06 < ax["ylim"][0] <= 0 and 1 <= ax["ylim"][1] < 1.06 for ax in rates)


def test_a_reward_beyond_1_and_an_all_zero_count_keep_honest_ranges(tmp_path: Path, figures: dict[str, Any]) -> None:
    run = write_run(tmp_path / "sgt", "sgt", steps=6)

    def change(row: dict[str, Any]) -> None:
        if row["kind"] == "train":
            row["reward_mean"] = 2.5 if row["policy"] == "qwen-a" else 0.2  # a user's reward goes to 2.5
            row["sgt/rescues"] = 0

    edit_rows(run, change)
    plots.plot_runs([run], tmp_path / "plots")
    limits = {ax["ylim"] for ax in drawn(figures["training_reward.png"])}
    assert len(limits) == 1
    (low, high), = limits
    assert low <= 0 and 2.5 <= high < 2.7
    rescues = [ax for ax in drawn(figures["regime_metrics.png"]) if ax["title"].endswith("SGT rescues")]
    assert len(rescues) == 2 and all(ax["ylim"] == pytest.approx((-0.04, 1.04)) for ax in rescues)


def test_line_styles_mean_the_run_in_every_figure(tmp_path: Path, figures: dict[str, Any]) -> None:
    """regime_metrics.png drew a line per policy in the styles every other figure gives the runs."""
    runs = [write_run(tmp_path / r, r, seed=i, steps=6) for i, r in enumerate(("standalone", "sgt"))]
    twin = tmp_path / "sgt-again"
    write_run(twin, "sgt", seed=5, steps=6)
    plots.plot_runs([*runs, twin], tmp_path / "plots")
    legends = [figure["legend"] for figure in figures.values()]
    run_styles = legends[0]
    assert set(run_styles) == {"standalone", "sgt (sgt)", "sgt (sgt-again)"}
    for name, figure in figures.items():
        assert set(figure["legend"]) <= set(run_styles), name  # every legend names runs, not policies
        assert all(same_style(run_styles[label], style) for label, style in figure["legend"].items()), name
        for ax in drawn(figure):
            for line in ax["lines"]:
                assert any(same_style(line, style) for style in figure["legend"].values()), (name, ax["title"])
    mosaic = drawn(figures["regime_metrics.png"])
    assert {style for ax in mosaic for style in ax["lines"]} == {run_styles["sgt (sgt)"], run_styles["sgt (sgt-again)"]}


def test_titles_and_y_labels_are_words(tmp_path: Path, figures: dict[str, Any]) -> None:
    """Built-in metrics by the map of words, a per-peer PRP diagnostic by its pattern (in its learner's sources
    figure), a metric with no words yet by its key in words."""
    run = write_run(tmp_path / "sgt", "sgt", steps=6)
    edit_rows(run, lambda row: row.update({"prp/from/qwen-b/ess": 0.9, "sgt/peer_hit_rate": 0.3})
              if row["kind"] == "train" else None)
    plots.plot_runs([run], tmp_path / "plots")
    for name, figure in figures.items():
        for ax in drawn(figure):
            assert ax["ylabel"], (name, ax["title"])
            assert "/" not in ax["title"] and "_" not in ax["title"], (name, ax["title"])  # no raw metric keys
    titles = {ax["title"].replace("\n", " ") for ax in drawn(figures["regime_metrics.png"])}
    assert titles == {f"{policy}: {title}" for policy in ("qwen-a", "qwen-b") for title in (
        "SGT gate rate", "SGT rescues", "sgt: peer hit rate")}
    for learner in ("qwen-a", "qwen-b"):  # per-source diagnostics: one figure per learner (the per-peer keys)
        assert [ax["title"] for ax in drawn(figures[f"sources_{learner}.png"])] == ["from qwen-b: effective sample size"]
    validation = [ax["title"] for ax in figures["validation_reward.png"]["axes"]]
    assert validation == ["qwen-a", "qwen-b", "mean of the 2 policies"]


def pool_and_task_runs(tmp_path: Path) -> tuple[Path, Path, Path]:
    tiny = write_run(tmp_path / "tiny", "sgt", steps=4, pool="tiny")
    smol = write_run(tmp_path / "smol", "standalone", steps=4, pool="smol")
    other_task = write_run(tmp_path / "words", "standalone", steps=4, pool="tiny")
    for run, task in ((tiny, "synthetic-arith"), (smol, "synthetic-arith"), (other_task, "dataset")):
        (run / "config.yaml").write_text(f"task:\n  name: {task}\n  source: null\ngrpo:\n  beta: 0.0\n")
    return tiny, smol, other_task


def test_runs_of_different_pools_or_tasks_are_refused_unless_allowed(tmp_path: Path, figures: dict[str, Any]) -> None:
    tiny, smol, other_task = pool_and_task_runs(tmp_path)
    with pytest.raises(DataError, match=r"differ in pool: .*tiny.*smol.*--allow-mixed"):
        plots.plot_runs([tiny, smol], tmp_path / "p1")
    with pytest.raises(DataError, match=r"differ in task\.name: .*synthetic-arith.*dataset"):
        plots.plot_runs([tiny, other_task], tmp_path / "p2")
    assert not (tmp_path / "p1").exists() and not (tmp_path / "p2").exists()
    with pytest.warns(UserWarning, match="differ in pool"):
        assert plots.plot_runs([tiny, smol], tmp_path / "p3", allow_mixed=True)
    assert "validation_reward.png" in figures


def test_plot_cli_refuses_mixed_runs_and_says_so_when_allowed(tmp_path: Path, figures: dict[str, Any]) -> None:
    tiny, smol, _ = pool_and_task_runs(tmp_path)
    runner = CliRunner()
    res = runner.invoke(app, ["plot", str(tiny), str(smol), "--out", str(tmp_path / "refused")])
    output = " ".join(res.output.split())
    assert res.exit_code == 2 and "differ in pool" in output and "--allow-mixed" in output
    res = runner.invoke(app, ["plot", str(tiny), str(smol), "-o", str(tmp_path / "mixed"), "--allow-mixed"])
    output = " ".join(res.output.split())
    assert res.exit_code == 0, res.output
    assert "validation_reward.png" in figures
    assert f"wrote{tmp_path / 'mixed'}" in "".join(res.output.split())  # -o, the short form of --out (a long path may wrap)
    assert "warning: drawing runs that differ in pool" in output
    assert {row["run"] for row in plots.summary_rows([tiny, smol])} == {"tiny/sgt", "smol/standalone"}


def test_no_mean_panel_over_different_policies(tmp_path: Path, figures: dict[str, Any]) -> None:
    """Two pools' policies differ: a mean per run would average different models; the figure has no such panel."""
    first = write_run(tmp_path / "a", "sgt", steps=4, pool="tiny")
    second = write_run(tmp_path / "b", "sgt", steps=4, pool="other")
    edit_rows(second, lambda row: row.update(policy=row["policy"] + "-x"))
    info = json.loads((second / "run.json").read_text())
    info["policies"] = [dict(p, name=p["name"] + "-x") for p in info["policies"]]
    (second / "run.json").write_text(json.dumps(info))
    with pytest.warns(UserWarning, match="differ in pool"):
        plots.plot_runs([first, second], tmp_path / "plots", allow_mixed=True)
    titles = [ax["title"] for ax in figures["validation_reward.png"]["axes"]]
    assert titles == ["qwen-a", "qwen-b", "qwen-a-x", "qwen-b-x"]

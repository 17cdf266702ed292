"""`mutualrl plot --group-by`: seeds aggregated into one band per group (fake finished runs, tests/report_fakes.py)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from report_fakes import write_finished_run, write_sweep
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.evaluation import grouped_plot
from mutualrl.evaluation.report.build import build_report

SCORES = {"standalone": [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0]], "sgt": [[1, 1, 1, 0], [1, 1, 0, 1], [1, 1, 1, 1]],
          "prp": [[0, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]]}


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return write_sweep(tmp_path / "sw", SCORES)


def test_each_group_is_the_mean_over_its_seeds_with_the_reports_interval(sweep: Path) -> None:
    report = build_report([sweep])
    panels = grouped_plot.panel_bands(report.groups)
    sgt = panels[("tiny-bpe", "all")]["sgt"]
    assert sgt.steps == [0, 3] and sgt.n == 3
    assert sgt.mean[1] == pytest.approx(statistics.fmean(sum(s) / 4 for s in SCORES["sgt"]))
    report_row = next(r for r in report.rows if (r.group, r.policy, r.task_group) ==
                      ("sgt", "tiny-bpe", "all"))
    assert (sgt.low[1], sgt.high[1]) == pytest.approx(report_row.stats.ci95)  # the band is the report's interval
    assert sgt.low[0] == sgt.high[0] == 0.0  # every seed at 0 before training: no width


@pytest.mark.slow  # a 300 dpi PNG
def test_the_figure_legend_title_and_caption(sweep: Path, tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["plot", "--group-by", "regime", str(sweep), "-o", str(tmp_path / "figs"),
                                    "--format", "png", "--width", "one"])
    assert done.exit_code == 0, done.output
    figure = tmp_path / "figs" / "heldout_reward_by_regime.png"
    from PIL import Image

    with Image.open(figure) as image:
        assert 900 <= image.size[0] <= 1100  # 3.35 in at 300 dpi, cropped to what is drawn
    caption = (tmp_path / "figs" / "heldout_reward_by_regime.caption.txt").read_text()
    assert "standalone n = 3, prp n = 3, sgt n = 3" in caption and "band: 95% Student t interval" in caption
    assert "no smoothing" in caption and "pool tiny, task data (reward exact), 3 steps" in caption


def test_the_legend_says_n_and_the_title_names_pool_task_and_steps(sweep: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def keep(fig, entries, out):
        seen["legend"] = [label for label, _ in entries]
        seen["title"] = fig._suptitle.get_text()
        seen["panels"] = [ax.get_title() for ax in fig.axes]
        ax = fig.axes[0]
        seen["bars"] = [tuple(line.get_ydata()) for line in ax.get_lines() if len(line.get_xdata()) == 2
                        and line.get_xdata()[0] == line.get_xdata()[1]]
        seen["hatches"] = [band.get_hatch() for band in ax.collections]
        return out

    monkeypatch.setattr(grouped_plot, "save_figure", keep)
    grouped_plot.plot_grouped([sweep], tmp_path, ["regime"], "pdf", "two")
    # the legend says what a band and a bar are: the band a t interval over seeds, the bar the report's own interval
    assert seen["legend"] == ["standalone (n = 3)", "prp (n = 3)", "sgt (n = 3)", grouped_plot.BAND_KEY,
                             grouped_plot.BAR_KEY]
    report = build_report([sweep])
    wanted = [row.mean_ci for row in report.rows if row.policy == "tiny-bpe" and row.task_group == "all"]
    assert len(wanted) == 3 and None not in wanted  # a bar per group in the first panel: the report's numbers
    assert [v for bar in sorted(seen["bars"]) for v in bar] == pytest.approx([v for ci in sorted(wanted) for v in ci])
    assert len(set(seen["hatches"])) == len(seen["hatches"]) == 3  # overlapping bands stay apart
    assert seen["title"] == "tiny pool, task data (reward exact), 3 steps"
    assert seen["panels"][:3] == ["tiny-bpe: all", "tiny-bpe: add", "tiny-bpe: sub"]


def test_a_bad_format_is_refused(sweep: Path, tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["plot", "--group-by", "regime", str(sweep), "--format", "jpg"])
    assert done.exit_code != 0 and "expected one of pdf, svg, png" in done.output


def test_plot_compares_data_by_content_and_names_other_differences(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --group-by too: one data file under two paths draws together; a different learning rate is drawn
    but said, and labels the lines."""
    from mutualrl.evaluation import plots

    monkeypatch.setattr(plots, "plot_metric_panels", lambda runs, *a, **k: seen.update(labels=[r.label for r in runs]))
    monkeypatch.setattr(plots, "plot_grid", lambda *a, **k: None)
    monkeypatch.setattr(plots, "plot_metric_mosaic", lambda *a, **k: None)
    monkeypatch.setattr(plots, "plot_sources", lambda *a, **k: [])
    seen: dict = {}
    a = write_finished_run(tmp_path / "a", "sgt", 1, {"tiny-bpe": [1, 0]}, task__source="/tmp/x/data")
    b = write_finished_run(tmp_path / "b", "sgt", 1, {"tiny-bpe": [1, 1]}, task__source="data",
                           grpo__learning_rate=2e-4)
    with pytest.warns(UserWarning, match=r"the runs also differ in grpo.learning_rate: 0.0001 \(a\), 0.0002 \(b\)"):
        plots.plot_runs([a, b], tmp_path / "figs")
    assert seen["labels"] == ["sgt (lr 0.0001)", "sgt (lr 0.0002)"]
    c = write_finished_run(tmp_path / "c", "sgt", 1, {"tiny-bpe": [1, 1]}, task__source="data", data_sha="d" * 64)
    from mutualrl.errors import DataError

    with pytest.raises(DataError, match="task.source"):
        plots.plot_runs([a, c], tmp_path / "figs2")


def test_the_axes_fit_what_is_drawn_with_ticks_at_validation_steps(sweep: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """One y label for the figure (one per row overprinted at one column), the y range fitted to the lines and
    bands (not a fixed 0-1) but never past the reward's range (the bands of 3 seeds run past 0 and 1 here: clipped,
    and the caption says so), x ticks where validation ran (0 and 3 here, not 0, 1, 2, 3)."""
    seen = {}

    def keep(fig, entries, out):
        ax = fig.axes[0]
        seen.update(ylim=ax.get_ylim(), xticks=list(ax.get_xticks()), ylabels=[a.get_ylabel() for a in fig.axes],
                    supylabel=fig._supylabel.get_text())
        return out

    monkeypatch.setattr(grouped_plot, "save_figure", keep)
    grouped_plot.plot_grouped([sweep], tmp_path, ["regime"], "pdf", "one")
    assert seen["xticks"] == [0, 3] and seen["supylabel"] == "held-out reward@1" and not any(seen["ylabels"])
    report = build_report([sweep])
    intervals = [r.stats.ci95 for r in report.rows if r.stats.ci95]
    assert min(low for low, _ in intervals) < 0 and max(high for _, high in intervals) > 1  # the report's own
    assert seen["ylim"] == (0.0, 1.0)
    panels = grouped_plot.panel_bands(report.groups)
    assert grouped_plot.clip_bands(panels, grouped_plot.reward_range(panels))
    drawn = [v for by_label in panels.values() for b in by_label.values() for v in [*(b.low or []), *(b.high or [])]]
    assert 0.0 in drawn and 1.0 in drawn and min(drawn) >= 0 and max(drawn) <= 1
    assert "Bands clipped to [0, 1], the range of every run's value" in grouped_plot.caption(report, (0.0, 1.0))


def test_a_reward_outside_0_1_is_not_clipped():
    wide = {("p", "all"): {"g": grouped_plot.band([{0: -2.0, 1: 3.0}, {0: -1.0, 1: 2.5}, {0: 0.5, 1: 1.0}])}}
    assert grouped_plot.reward_range(wide) is None and not grouped_plot.clip_bands(wide, None)


def test_a_figure_of_single_runs_says_each_line_is_one_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mutualrl.evaluation import plot_style

    titles = []
    monkeypatch.setattr(plot_style, "write_figure", lambda fig, out, **_: titles.append(
        fig.legends[0].get_title().get_text()) or out)
    plt = plot_style.pyplot()
    fig, _ = plt.subplots()
    plot_style.save_with_legend(fig, [("sgt", {"color": "k"}), ("standalone", {"color": "b"})], tmp_path / "f.png")
    assert titles and titles[0].startswith("each line: one run, one seed (n = 1")


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_the_figures_caption_names_each_caveat_cause_once_unless_told(sweep: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setattr(grouped_plot, "save_figure", lambda fig, entries, out: out)
    for seed in (1, 2, 3):  # sgt used no peer sample for tiny-bpe: a caveat, one cause for three runs
        used = {"peer_samples_used": 0.0, "steps_with_peer_figures": 3, "steps_without_peer_samples": 3}
        (sweep / f"sgt-seed{seed}" / "summary.json").write_text(json.dumps({
            "pool": "tiny", "regime": "sgt", "seed": seed, "policies": {"tiny-bpe": used},
            "warnings": ["sgt used 0% of peer samples for tiny-bpe (none in 3 of 3 steps): it trained as standalone"]}))
    _, short = grouped_plot.plot_grouped([sweep], tmp_path, ["regime"], "pdf", "one")
    _, full = grouped_plot.plot_grouped([sweep], tmp_path, ["regime"], "pdf", "one", full_caption=True)
    report = build_report([sweep])
    assert full == grouped_plot.caption(report, (0.0, 1.0))
    assert len(short) < len(full) and "n = 3: a band from so few runs is wide for that reason" in short
    causes = [words for _, words in grouped_plot.caveat_causes(report).values()]
    assert causes and all(short.count(words) == 1 for words in causes)
    assert "sgt, tiny-bpe: used 0% of its peers' samples" in full and "sgt, tiny-bpe: used 0%" not in short

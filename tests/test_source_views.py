"""Where the per-source diagnostics (``<regime>/from/<peer>/<figure>``) are shown: the progress display's detail
lines, ``mutualrl plot``'s figure per learner, ``mutualrl see inspect``'s table and JSON."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from test_eval_plots import assert_png, write_run
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.launch.supervise.progress_display import PolicyRows, progress_display, source_details
from mutualrl.see.files import HEARTBEAT_DIR

PRP_FIGURES = {"prp/from/qwen-b/ess": 0.91, "prp/from/qwen-b/log_ratio_mean": -0.02,
               "prp/from/qwen-b/log_ratio_max": 1.3, "prp/from/qwen-b/truncated_share": 0.03,
               "prp/from/qwen-b/filtered_share": 0.0, "prp/from/qwen-b/used_share": 1.0}


# -- the progress display's detail view -----------------------------------------------------------
def test_source_details_put_each_peers_figures_in_a_few_words():
    details = source_details({"phase": "training", "reward_mean": 0.5, **PRP_FIGURES,
                              "sgt/from/qwen-c/used_share": 0.25, "sgt/from/qwen-c/rescue_logp": -12.5,
                              "prp/from/qwen-d/ess": float("nan")})
    assert details == {"qwen-b": "ess 0.91  log w -0.02  max +1.30  trunc 3%  filt 0%  used 100%",
                       "qwen-c": "used 25%  logp -12.5"}  # a NaN figure is not shown


def test_the_detail_lines_sit_under_their_policy_without_a_step_or_bar():
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=True, color_system=None)
    progress = progress_display(console)
    rows = PolicyRows(progress, ["qwen-a", "qwen-b"])
    for name in ("qwen-a", "qwen-b"):
        progress.update(rows.main[name], completed=2, total=8, info="training  reward 0.5", eta="eta 0:10")
    rows.show_sources("qwen-a", PRP_FIGURES)
    console.print(progress.make_tasks_table(progress.tasks))
    lines = [line.rstrip() for line in out.getvalue().splitlines() if line.strip()]
    assert len(lines) == 3  # qwen-b has no figures from qwen-a: its detail line stays hidden
    assert lines[0].startswith("qwen-a") and lines[2].startswith("qwen-b")
    assert "from qwen-b" in lines[1] and "ess 0.91" in lines[1] and "used 100%" in lines[1]
    assert "2/8" not in lines[1] and "━" not in lines[1] and "eta" not in lines[1]


@pytest.mark.slow  # imports the training layer (torch, transformers)
def test_the_status_file_carries_the_per_source_figures(tmp_path):
    from types import SimpleNamespace

    from mutualrl.run_folder import RunPaths
    from mutualrl.training.callbacks import StatusCallback

    callback = StatusCallback(RunPaths(tmp_path), "qwen-a")
    state = SimpleNamespace(is_world_process_zero=True, global_step=2, max_steps=8)
    callback.on_log(None, state, None, logs={"reward": 0.5, **PRP_FIGURES, "prp/token_clip_rate": 0.1})
    status = json.loads(RunPaths(tmp_path).status("qwen-a").read_text())
    assert {key: status[key] for key in PRP_FIGURES} == PRP_FIGURES


# -- mutualrl plot ------------------------------------------------------------------------------
def _with_sources(run: Path, regime: str, spread: float) -> Path:
    """Add per-source figures of ``regime`` to every train line (each policy's peer is the other)."""
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for line in lines:
        if line["kind"] == "train":
            peer = "qwen-b" if line["policy"] == "qwen-a" else "qwen-a"
            line.update({f"{regime}/from/{peer}/ess": 0.9 - spread, f"{regime}/from/{peer}/log_ratio_mean": spread,
                         f"{regime}/from/{peer}/log_ratio_max": 3 * spread, f"{regime}/from/{peer}/used_share": 1.0})
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run


@pytest.mark.slow
def test_plot_draws_one_figure_per_learner_on_shared_ranges(tmp_path, monkeypatch):
    from mutualrl.evaluation import plots

    runs = [_with_sources(write_run(tmp_path / "prp", "prp", steps=6), "prp", 0.2),
            _with_sources(write_run(tmp_path / "hacpo", "hacpo", steps=6, seed=1), "hacpo", 0.5)]
    lines = [json.loads(line) for line in (runs[1] / "metrics.jsonl").read_text().splitlines()]
    for line in lines:  # one learner's peer looks further off in the hacpo run: a wider log-ratio range there
        if line["kind"] == "train" and line["policy"] == "qwen-b":
            line["hacpo/from/qwen-a/log_ratio_mean"] = 2.0
    (runs[1] / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    saved = {}
    original = plots.save_with_legend

    def keep(fig, entries, out):
        saved[out.name] = (fig, [label for label, _ in entries])
        return original(fig, entries, out)

    monkeypatch.setattr(plots, "save_with_legend", keep)
    loaded = [plots.load_run(run) for run in runs]
    plots.label_runs(loaded)
    written = {p.name: p for p in plots.plot_sources(loaded, tmp_path, smooth=None)}
    assert set(written) == {"sources_qwen-a.png", "sources_qwen-b.png"}
    assert not plots._regime_keys(loaded)  # not in regime_metrics.png as well
    for name in ("sources_qwen-a.png", "sources_qwen-b.png"):
        assert_png(written[name])
        fig, legend = saved[name]
        assert legend == ["prp", "hacpo"]  # both runs, each in its own style, in one panel per figure
        titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
        assert titles[0].startswith("from ") and "effective sample size" in titles[0]
        ranges = {ax.get_title().split(": ")[1]: ax.get_ylim() for ax in fig.axes if ax.get_visible()}
        assert ranges["effective sample size"][0] <= 0 and ranges["effective sample size"][1] >= 1
        assert ranges["mean log importance ratio"][1] >= 2.0  # qwen-b's 2.0 sets qwen-a's range too
        assert len(fig.axes[0].lines) == 2


# -- mutualrl see inspect -----------------------------------------------------------------------
def test_see_inspect_shows_the_per_source_table_of_a_run_and_of_its_exchange(tmp_path):
    run = tmp_path / "run"
    (run / "see" / HEARTBEAT_DIR).mkdir(parents=True)
    rows = [{"kind": "train", "policy": "qwen-a", "step": step, "prp/from/qwen-b/ess": ess,
             "prp/from/qwen-b/used_share": 1.0, "prp/from/qwen-b/truncated_share": None}
            for step, ess in ((1, 0.5), (2, 0.7), (3, 0.9))]
    rows.append({"kind": "eval", "policy": "qwen-a", "step": 3, "prp/from/qwen-b/ess": 0.0})
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    runner = CliRunner()
    for path in (run, run / "see"):
        result = runner.invoke(app, ["see", "inspect", str(path), "--json"])
        assert result.exit_code == 0, result.output
        sources = json.loads(result.stdout)["sources"]
        assert sources == [{"learner": "qwen-a", "peer": "qwen-b", "regime": "prp", "steps": 3, "last_step": 3,
                            "last": {"ess": 0.9, "used_share": 1.0},
                            "mean": {"ess": pytest.approx(0.7), "used_share": 1.0}}]
    result = CliRunner().invoke(app, ["see", "inspect", str(run)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Per-source diagnostics" in result.output and "0.900 / 0.700" in result.output


def test_see_inspect_of_an_exchange_without_metrics_has_no_source_table(tmp_path):
    (tmp_path / "see" / HEARTBEAT_DIR).mkdir(parents=True)
    result = CliRunner().invoke(app, ["see", "inspect", str(tmp_path / "see"), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["sources"] == []

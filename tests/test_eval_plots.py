"""`mutualrl plot`: figures from fixture run folders (metrics.jsonl + run.json)."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.errors import DataError
from mutualrl.evaluation.plot_style import run_styles
from mutualrl.evaluation.plots import kl_note, load_run, mean_series, plot_runs, series, summary_rows

# Synthetic run folders (metrics.jsonl + run.json, docs/run_layout) for the plots to read.

POLICIES = ("qwen-a", "qwen-b")


def write_run(folder: Path, regime: str, *, steps: int = 30, eval_every: int = 5, seed: int = 0,
              pool: str = "2qwen", tasks: tuple[str, ...] = ("math", "gsm8k"), truncated_tail: bool = False,
              groups: tuple[str, ...] = ()) -> Path:
    """A run folder with train lines every step and eval lines every ``eval_every`` steps (step 0 included)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    info = {"pool": pool, "regime": regime, "task": tasks[0],
            "policies": [{"name": p, "model": f"hub/{p}", "tokenizer": None} for p in POLICIES],
            "started": "2026-01-01T00:00:00", "finished": None, "status": "done"}
    (folder / "run.json").write_text(json.dumps(info))
    lift = {"standalone": 0.10, "xgrpo": 0.12, "sgt": 0.16, "prp": 0.04}.get(regime, 0.1)
    lines = []
    for k, policy in enumerate(POLICIES):
        base = 0.35 + 0.1 * k
        for step in range(steps + 1):
            progress = 1 - math.exp(-step / 12)
            if step % eval_every == 0:
                line = {"kind": "eval", "policy": policy, "step": step, "regime": regime, "time": 1000.0 + step,
                        "eval/reward@1": base + lift * progress + rng.uniform(-0.01, 0.01), "eval/n": 200}
                if len(tasks) > 1:  # per-task keys only when validating on several tasks (run_layout)
                    for j, task in enumerate(tasks):
                        line[f"eval/{task}/reward@1"] = base - 0.1 * j + lift * progress
                for j, group in enumerate(groups):  # task groups, as the synthetic task logs its families
                    line[f"eval/group/{group}/reward@1"] = (0.9 if j == k else lift * progress)
                lines.append(line)
            if step == 0:
                continue
            line = {"kind": "train", "policy": policy, "step": step, "regime": regime, "time": 1000.0 + step,
                    "reward_mean": base + lift * progress + rng.uniform(-0.05, 0.05), "reward_std": 0.3,
                    "entropy": 0.9 - 0.2 * progress + (0.05 if regime == "sgt" else 0) + rng.uniform(-0.02, 0.02),
                    "kl": 0.001 * step * (2.0 if regime == "prp" else 1.0), "loss": 0.01, "learning_rate": 1e-6,
                    "grad_norm": 0.5}
            if regime == "sgt":
                line["sgt/gate_rate"] = max(0.0, 0.2 - 0.15 * progress + rng.uniform(-0.01, 0.01))
                line["sgt/rescues"] = int(10 * (1 - progress))
            lines.append(line)
    text = "\n".join(json.dumps(line) for line in lines) + "\n"
    if truncated_tail:
        text += '{"kind": "train", "policy": "qwen-a", "st'
    (folder / "metrics.jsonl").write_text(text)
    return folder


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


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_plot_runs_writes_every_figure(runs: list[Path], tmp_path: Path) -> None:
    written = plot_runs(runs, tmp_path / "plots")
    assert {p.name for p in written} == ALL_FIGURES
    for path in written:
        assert_png(path)


@pytest.mark.slow  # over 2 s: outside the fast tier
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


def test_damaged_lines_are_skipped_with_a_warning(tmp_path: Path) -> None:
    """One rule for every reader of a metrics file (mutualrl.run_folder.read_metric_rows): a line cut short by a
    kill, at the end or (once more rows were appended after it) in the middle, is skipped and counted."""
    run = write_run(tmp_path / "live", "sgt", steps=4, truncated_tail=True)
    with pytest.warns(UserWarning, match="skipping 1 damaged line$"):
        data = load_run(run)
    assert len(data.train) == 8
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines.insert(2, "{broken")
    lines.insert(3, "[1, 2]")  # JSON, but not a row
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match="skipping 3 damaged lines"):
        assert len(load_run(run).train) == 8
    with pytest.raises(DataError, match="no metrics.jsonl"):
        load_run(tmp_path)


@pytest.mark.slow  # over 2 s: outside the fast tier
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


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_runs_with_task_groups_get_a_per_group_figure_and_no_task_figure(tmp_path: Path) -> None:
    runs = [write_run(tmp_path / r, r, seed=i, steps=12, pool="tiny", tasks=("synthetic-arith",),
                      groups=("add", "sub")) for i, r in enumerate(("standalone", "sgt"))]
    written = {p.name: p for p in plot_runs(runs, tmp_path / "plots")}
    assert "validation_reward_by_group.png" in written and "validation_reward_by_task.png" not in written
    assert_png(written["validation_reward_by_group.png"])


# ---------------------------------------------------------------------------------------
# What a reader trips on (issue 27): hidden lines, a silently missing KL panel, a 5316-px strip
# ---------------------------------------------------------------------------------------


def pixels_near(path: Path, rgb: tuple[int, int, int], tolerance: int = 30) -> int:
    with Image.open(path) as img:
        return sum(count for count, pixel in img.convert("RGB").getcolors(maxcolors=1 << 22)
                   if all(abs(a - b) <= tolerance for a, b in zip(pixel, rgb, strict=True)))


def test_every_run_has_its_own_dash_pattern_and_marker() -> None:
    styles = run_styles(6)
    assert len({str(s.linestyle) for s in styles}) == 6 and len({s.marker for s in styles}) == 6
    assert not styles[0].hollow and all(s.hollow for s in styles[1:])


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_run_equal_to_another_stays_visible(tmp_path: Path) -> None:
    """SGT whose gate never fired logs exactly the standalone values: both lines must show."""
    first = write_run(tmp_path / "standalone", "standalone", steps=10, seed=0)
    same = tmp_path / "sgt"
    shutil.copytree(first, same)
    (same / "run.json").write_text((first / "run.json").read_text().replace('"standalone"', '"sgt"'))
    written = {p.name: p for p in plot_runs([first, same], tmp_path / "plots")}
    blue, orange = (31, 119, 180), (255, 127, 14)  # tab10's first two colours: the two runs
    figure = written["validation_reward.png"]
    assert pixels_near(figure, blue) > 300 and pixels_near(figure, orange) > 300


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_kl_panels_say_why_they_are_empty_when_beta_is_zero(tmp_path: Path) -> None:
    run = write_run(tmp_path / "beta0", "standalone", steps=6)
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text("".join(json.dumps({k: v for k, v in line.items() if k != "kl"}) + "\n"
                                               for line in lines))
    (run / "config.yaml").write_text("grpo:\n  beta: 0.0\n")
    loaded = load_run(run)
    assert loaded.beta == 0.0 and "β = 0" in kl_note([loaded])
    assert "β = 0" not in kl_note([load_run(write_run(tmp_path / "no-config", "standalone", steps=2))])
    figure = next(p for p in plot_runs([run], tmp_path / "plots") if p.name == "optimization.png")
    with Image.open(figure) as img:
        assert img.height > 700  # two rows of panels: entropy, and the KL row with its note


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_regime_metrics_are_a_grid_with_a_readable_aspect(tmp_path: Path) -> None:
    run = write_run(tmp_path / "sgt", "sgt", steps=8)
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for line in lines:
        if line["kind"] == "train":
            line.update({f"sgt/metric_with_a_long_name_{i}": 0.1 * i for i in range(12)})
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    figure = next(p for p in plot_runs([run], tmp_path / "plots") if p.name == "regime_metrics.png")
    assert_png(figure)
    with Image.open(figure) as img:  # 14 metrics: 4 columns x 4 rows, not 14 rows of 2 panels (1056x5316 px)
        assert img.height < 2000 and 0.6 < img.width / img.height < 2.0

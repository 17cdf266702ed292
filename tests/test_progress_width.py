"""The live progress display at 80 columns keeps each policy's step (``20/200``) and a time estimate in view;
the figures after them are cut first (issue 49 item 6)."""

from __future__ import annotations

import io

from rich.console import Console

from mutualrl.launch.supervise.progress_display import StepClock, format_eta, progress_display

INFO = "training  reward 0.781  val@1 0.49  rescues 12  gate 0.25  H 0.321  frac 0.5  more 1.0"


def rendered(width: int) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=True, color_system=None)
    progress = progress_display(console)
    for name in ("tiny-bpe", "qwen2.5-math-1.5b-instruct-long-name"):
        task = progress.add_task(name, total=200, info=INFO, eta="eta 1:23")
        progress.update(task, completed=20)
    console.print(progress.make_tasks_table(progress.tasks))
    return [line for line in out.getvalue().splitlines() if line.strip()]


def test_at_80_columns_the_step_and_the_estimate_stay_and_the_figures_are_cut():
    lines = rendered(80)
    assert len(lines) == 2, lines  # one line per policy, nothing wrapped
    for line in lines:
        assert len(line) <= 80 and "20/200" in line and "eta 1:23" in line, line
        assert "…" in line and "more 1.0" not in line, line  # the figures were cut, not the step
    assert "reward 0.781" in rendered(200)[0]  # a wide terminal shows them all


def test_the_estimate_counts_only_steps_seen_made():
    now = [0.0]
    clock = StepClock(lambda: now[0])
    assert clock.eta("a", 100, 200) == "eta ?"  # resumed at step 100: no speed from the steps before
    now[0] = 60.0
    assert clock.eta("a", 101, 200) == "eta ?"  # the first step seen made: the clock starts here
    now[0] = 70.0
    assert clock.eta("a", 111, 200) == "eta 1:29"  # 10 steps in 10 s, 89 to go
    now[0] = 80.0
    assert clock.eta("a", 5, 200) == "eta ?"  # restarted from an earlier checkpoint
    assert clock.eta("b", 0, None) == "eta ?"
    assert format_eta(3725) == "eta 1:02:05"

"""Saying when there is no signal (issue 39): several steps in which every group's K rewards are equal are said
once, in the worker's log (with one completion and its reward) and on the launcher's progress display."""

from __future__ import annotations

import io

from rich.console import Console

from mutualrl.launch.supervise.runner import PoolRunner
from mutualrl.training.no_signal import NoSignalWatch, group_shares, no_signal_note


def test_group_shares_count_flat_and_all_fail_groups():
    assert group_shares([0, 0, 1, 1, 0, 1], 2) == (2 / 3, 1 / 3)
    assert group_shares([float("nan")] * 4, 2) == (0.0, 0.0)


def test_the_worker_says_it_once_after_three_flat_steps_with_a_completion():
    watch = NoSignalWatch("p")
    flat, spread = [0.0] * 8, [0.0, 1.0] * 4
    assert watch.observe(flat, 4, "x", 0.0)[1] is None and watch.observe(spread, 4, "x", 0.0)[1] is None
    assert watch.observe(flat, 4, "x", 0.0)[1] is None and watch.observe(flat, 4, "x", 0.0)[1] is None
    failed, note = watch.observe(flat, 4, "The answer is 7", 0.0)
    assert failed == 1.0 and "no learning signal for 3 steps" in note and "(100% of groups all-fail)" in note
    assert "'The answer is 7' -> reward 0" in note and "format" in note
    assert watch.observe(flat, 4, "x", 0.0)[1] is None  # once


def test_the_launcher_prints_it_once_from_the_merged_rows():
    rows = [{"kind": "train", "policy": "a", "step": s, "frac_reward_zero_std": 1.0, "mutual/all_fail_groups": 0.75}
            for s in (1, 2, 3, 4)]
    assert no_signal_note("a", rows[:2]) is None
    assert no_signal_note("a", [*rows[:2], {**rows[2], "frac_reward_zero_std": 0.5}]) is None
    runner = PoolRunner.__new__(PoolRunner)
    out = io.StringIO()
    runner.console, runner.recent_rows, runner.silent_said = Console(file=out, width=300), {}, set()
    runner._say_no_signal(rows[:2])
    assert out.getvalue() == ""
    runner._say_no_signal(rows[2:])
    text = out.getvalue()
    assert text.count("no learning signal") == 1 and "(75% of groups all-fail)" in text and "logs/a.log" in text

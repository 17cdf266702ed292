"""Counts that survive a resume (issue 39): ``sgt/rescues_total`` continues from the checkpoint's logged total,
and the summary totals a counter that restarted (max of the counter undercounted every resumed run)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from mutualrl.launch.rundir.summary import cumulative_total, summarise
from mutualrl.regimes.sgt.adapter import logged_total
from mutualrl.run_folder import RunPaths


def test_the_counter_goes_on_from_the_checkpoints_log_history():
    history = [{"loss": 0.1, "sgt/rescues_total": 3.0, "step": 1}, {"sgt/rescues_total": 7.0, "step": 2},
               {"eval_reward@1": 0.5, "step": 2}]
    assert logged_total(history) == 7 and logged_total([]) == 0 and logged_total([{"loss": 1.0}]) == 0


def test_the_summary_sums_a_counter_that_restarted_on_resume(tmp_path):
    assert cumulative_total([1, 3, 5, 2, 4]) == 9 and cumulative_total([1, 3, 5, 7]) == 7 and cumulative_total([]) == 0
    paths = RunPaths(tmp_path)
    rows = [{"kind": "train", "policy": "p", "step": s, "reward_mean": 0.1, "sgt/rescues_total": t}
            for s, t in ((1, 2.0), (2, 4.0), (3, 1.0), (4, 3.0))]  # steps 3-4 ran after a resume that reset it
    paths.metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = SimpleNamespace(pool=SimpleNamespace(name="x", policies=[SimpleNamespace(name="p", model="m")]),
                             regime=SimpleNamespace(name="sgt"), grpo={"seed": 1})
    summary = summarise(paths, config, SimpleNamespace(seconds=1.0, extra={}))
    assert summary["policies"]["p"]["sgt_rescues"] == 7

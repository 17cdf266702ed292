"""``benchmarks/vllm_train_step.py``'s arithmetic, by hand (the timing itself lives in the benchmark)."""

from __future__ import annotations

import pytest

from bench_helpers import load_benchmark

bench = load_benchmark("vllm_train_step")


def _row(policy: str, step: int, step_time: float, rollout: float, kind: str = "train") -> dict:
    return {"kind": kind, "policy": policy, "step": step, "step_time": step_time, "mutual/rollout_seconds": rollout}


def test_step_medians_drop_the_first_step_and_other_rows():
    rows = [_row("a", 1, 100.0, 50.0), _row("a", 2, 4.0, 1.0), _row("a", 3, 6.0, 3.0), _row("a", 4, 5.0, 2.0),
            _row("a", 0, 99.0, 99.0, kind="eval"), _row("b", 2, 8.0, 2.0)]
    assert bench.step_medians(rows) == {"a": {"step_time": 5.0, "mutual/rollout_seconds": 2.0},
                                        "b": {"step_time": 8.0, "mutual/rollout_seconds": 2.0}}


def test_ratios_are_transformers_over_each_vllm_arm_per_policy_and_wall_time():
    def run(step_time: float, rollout: float, wall: float) -> dict:
        return {"wall_seconds": wall, "steps": {"a": {"step_time": step_time, "mutual/rollout_seconds": rollout}}}

    results = {"transformers": [run(10.0, 4.0, 100.0), run(12.0, 6.0, 120.0)],
               "vllm": [run(8.0, 2.0, 150.0), run(8.0, 3.0, 130.0)],
               "vllm-is": [run(20.0, 8.0, 200.0), run(24.0, 10.0, 240.0)]}
    out = bench.ratios(results)
    assert out["a"]["step_time"] == {"transformers_s": 11.0, "vllm_s": 8.0, "vllm-is_s": 22.0,
                                     "ratio_vllm": 1.375, "ratio_vllm-is": 0.5}
    assert out["a"]["mutual/rollout_seconds"]["ratio_vllm"] == pytest.approx(2.0)
    assert out["wall_seconds"] == {"transformers": 110.0, "vllm": 140.0, "vllm-is": 220.0, "ratio_vllm": 0.786,
                                   "ratio_vllm-is": 0.5}


def test_an_arm_list_must_start_with_transformers(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--backends", "vllm,transformers", "--out", str(tmp_path)])
    assert "--backends: transformers first" in capsys.readouterr().err

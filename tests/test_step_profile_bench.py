"""benchmarks/step_profile.py (issue 40): its FLOP/MFU arithmetic on hand-computed numbers, the split of a
step from the hook's and the trainer's rows, and (slow) a real 2-step tiny run whose parts add up."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench_helpers import BENCHMARKS, load_benchmark

profile = load_benchmark("step_profile")

# 1010 backbone weights (10 of them LoRA), h=4, V=100, 2 layers of attention width 4, a frozen head.
MODEL = {"linear_frozen": 1000, "linear_trainable": 10, "hidden": 4, "vocab": 100, "head_trainable": False,
         "layers": 2, "attn_width": 4, "gradient_checkpointing": False}


def test_pass_flops_by_hand() -> None:
    # 2 rows x 5 positions = 10 tokens, 8 of them scored by the head.
    fwd = profile.pass_flops(MODEL, rows=2, length=5, scored=8, grad=False)
    assert fwd == {"body": 2 * 1010 * 10, "attn": 4 * 2 * 25 * 4 * 2, "head": 2 * 4 * 100 * 8}  # 20200, 1600, 6400
    both = profile.pass_flops(MODEL, rows=2, length=5, scored=8, grad=True)
    # body: forward 20200 + input gradients 20200 (frozen base too) + weight gradients of the 10 LoRA weights 200
    # attention: forward 1600 + backward 3200; head: forward 6400 + recompute 6400 + input gradient 6400
    assert both == {"body": 40600, "attn": 4800, "head": 19200}
    trains_head = profile.pass_flops({**MODEL, "head_trainable": True}, rows=2, length=5, scored=8, grad=True)
    assert trains_head["head"] == 25600  # + its weight gradient
    checkpointed = profile.pass_flops({**MODEL, "gradient_checkpointing": True}, rows=2, length=5, scored=8, grad=True)
    assert checkpointed["body"] == 40600 + 20200 and checkpointed["attn"] == 4800 + 1600  # forward recomputed


def test_step_flops_keeps_grad_and_no_grad_apart() -> None:
    passes = [{"grad": True, "rows": 2, "length": 5, "scored": 8}, {"grad": False, "rows": 2, "length": 5, "scored": 8},
              {"grad": True, "rows": 2, "length": 5, "scored": 8}]
    assert profile.step_flops(MODEL, passes, grad=True) == {"body": 81200, "attn": 9600, "head": 38400}
    assert profile.step_flops(MODEL, passes, grad=False) == {"body": 20200, "attn": 1600, "head": 6400}


def test_mfu_is_ideal_time_over_actual_time() -> None:
    flops = {"body": 40600.0, "attn": 4800.0, "head": 19200.0}
    rates = {"hh": 1000.0, "hv": 500.0}
    # At the measured rates the GEMMs would take 45400/1000 + 19200/500 = 45.4 + 38.4 = 83.8 s.
    assert profile.effective_rate(flops, rates) == pytest.approx(64600 / 83.8)
    assert profile.mfu(flops, 100.0, rates) == pytest.approx(0.838)
    assert math.isnan(profile.mfu(flops, 0.0, rates))


def test_breakdown_splits_a_step() -> None:
    step = {"step_s": 10.0, "prepare_inputs_s": 4.0, "training_step_s": 9.0, "extra_loss_s": 0.5, "optimizer_s": 0.6,
            "trl": {"transformers.generate": 2.0, "_calculate_rewards": 0.1, "_prepare_inputs": 4.0},
            "logps": [{"phase": "rollout", "seconds": 0.4}, {"phase": "loss", "seconds": 2.0},
                      {"phase": "behaviour", "seconds": 0.05}]}  # PRP: scored inside the SEE build
    metrics = {"mutual/build_s": 0.15, "mutual/publish_s": 0.1, "mutual/read_s": 0.1, "mutual/wait_s": 0.5,
               "mutual/transform_s": 0.3}
    parts = profile.breakdown(step, metrics)
    assert parts["generation"] == 2.0 and parts["reward"] == 0.1 and parts["old_ref_logps"] == pytest.approx(0.45)
    assert parts["see_publish_read"] == pytest.approx(0.3) and parts["barrier_wait"] == 0.5
    assert parts["regime"] == pytest.approx(0.8) and parts["forward_backward"] == pytest.approx(4.5)
    assert parts["rollout_other"] == pytest.approx(4.0 - 2.0 - 0.1 - 0.45 - 0.3 - 0.5 - 0.3)
    assert parts["other"] == pytest.approx(10.0 - 9.0 - 0.6)
    measured = sum(parts[k] for k in profile.PARTS)
    assert measured + parts["rollout_other"] + parts["other"] == pytest.approx(10.0)  # nothing counted twice
    assert profile.coverage(parts) == pytest.approx(measured / 10.0)


@pytest.mark.benchmarks_and_recipes
@pytest.mark.slow
def test_step_profile_tiny(tmp_path: Path, offline_hub: None) -> None:
    root = BENCHMARKS.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root / "tests")])}
    done = subprocess.run([sys.executable, str(BENCHMARKS / "step_profile.py"), "--pool", "tiny", "--regime", "sgt",
                           "--steps", "2", "--out", str(tmp_path)], capture_output=True, text=True, env=env, cwd=root,
                          timeout=120)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    result = json.loads((tmp_path / "step-profile-tiny-sgt.json").read_text())
    assert set(result["policies"]) == {"tiny-bpe", "tiny-sp"} and result["command"].startswith("mutualrl train")
    for prof in result["policies"].values():
        assert [s["step"] for s in prof["steps"]] == [1, 2]
        assert set(prof["median_s"]) == {*profile.PARTS, *profile.RESIDUALS, "step"}
        for step in prof["steps"]:
            assert abs(step["coverage"] - 1) <= 0.2, step["parts"]  # the measured parts add up to the step
            assert step["parts"]["generation"] > 0 and step["parts"]["forward_backward"] > 0
        assert prof["peak_rss_mib"] > 0 and prof["validation_s_per_prompt"] > 0
        assert prof["gemm_flops_per_s"]["hh"] > 0 and prof["flops_forward_backward"] > 0
        assert 0 < prof["mfu_forward_backward"] < 1
        # on the CPU TRL's fused head scores every position, so counting only completions gives less
        assert prof["head_scored_per_completion_token"] > 1
        assert 0 < prof["mfu_forward_backward_completion_head"] < prof["mfu_forward_backward"]

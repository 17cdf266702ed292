"""benchmarks/learning.py (tiny pool): SGT − standalone per weak/strong group, on the validation subset and on the
whole test split, by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from learning import STRONG_FULL_TEST_TARGET, per_seed_gains, standalone_noise_floor  # noqa: E402


def run(after: dict[str, float], full: dict[str, float]) -> dict:
    return {"policies": {"p": {"groups_after": after, "groups_full_test": full}}}


def test_noise_floor_counts_standalone_seed_pairs_below_the_bound_by_hand() -> None:
    # seeds 1-3 of one policy: 0.98, 0.95, 0.98 -> ordered pairs (b - a): -0.03, 0, +0.03, +0.03, 0, -0.03
    observed = {"seeds": {1: {"p": {"strong": -0.03}}, 2: {"p": {"strong": 0.0}}, 3: {"p": {"strong": -0.02}}}}
    floor = standalone_noise_floor({"p": [0.98, 0.95, 0.98]}, observed, -0.02)
    assert floor["standalone_pairs"] == 6 and floor["standalone_pairs_below_bound"] == pytest.approx(2 / 6, abs=1e-4)
    assert floor["comparisons"] == 3 and floor["misses_expected_without_any_effect"] == 1.0
    assert floor["misses_seen"] == 1  # -0.02 itself meets the bound
    assert floor["standalone_worst_pair"] == -0.03 and floor["worst_seen"] == -0.03
    quiet = standalone_noise_floor({"p": [0.97, 0.97, 0.97]}, observed, -0.02)
    assert quiet["standalone_pairs_below_bound"] == 0 and quiet["misses_expected_without_any_effect"] == 0


def test_gains_on_the_subset_and_on_the_whole_test_split() -> None:
    roles = {"p": ("sub", "add")}  # (weak, strong)
    runs = {"standalone": {1: run({"add": 0.99, "sub": 0.0}, {"add": 0.98, "sub": 0.0})},
            "sgt": {1: run({"add": 0.95, "sub": 0.8}, {"add": 0.97, "sub": 0.78})}}
    subset = per_seed_gains(runs, roles)
    assert subset["seeds"] == {1: {"p": {"weak": 0.8, "strong": -0.04}}}
    assert subset["target_met_every_seed"] is True  # -0.04 >= -0.05
    full = per_seed_gains(runs, roles, "groups_full_test", STRONG_FULL_TEST_TARGET)
    assert full["seeds"] == {1: {"p": {"weak": 0.78, "strong": -0.01}}}
    assert full["target"]["strong_change_at_least"] == -0.02 and full["target_met_every_seed"] is True
    runs["sgt"][1]["policies"]["p"]["groups_full_test"]["add"] = 0.95  # -0.03 on the whole split
    assert per_seed_gains(runs, roles, "groups_full_test", STRONG_FULL_TEST_TARGET)["target_met_every_seed"] is False


def test_tiny_sgt_dev_rule_by_hand() -> None:
    """The λ rule fixed before the dev runs: the largest λ within the strong bound with the weak target met."""
    from tiny_sgt_dev import choose

    def table(weak: float, strong: float) -> dict:
        return {101: {"a": {"weak": weak, "strong": strong}, "b": {"weak": 0.8, "strong": 0.0}}}

    picked = choose({"1.0": table(0.5, -0.10), "0.3": table(0.4, -0.01), "0.1": table(0.35, 0.0)})
    assert picked["lam"] == "0.3" and picked["qualified"] is True
    picked = choose({"1.0": table(0.5, -0.10), "0.3": table(0.2, -0.01), "0.1": table(0.1, -0.05)})
    assert picked == {"lam": "0.3", "qualified": False, "worst": {
        "1.0": {"weak": 0.5, "strong": -0.10}, "0.3": {"weak": 0.2, "strong": -0.01},
        "0.1": {"weak": 0.1, "strong": -0.05}}}


@pytest.mark.slow
@pytest.mark.parametrize("tiny_regime_2_steps", ["grpo-randpert"], indirect=True)
def test_final_groups_evaluates_a_real_runs_final_weights(tiny_regime_2_steps) -> None:
    """Smoke: the benchmarks' whole-split evaluation runs `mutualrl eval` on a finished run and groups by family."""
    from e2e_helpers import assert_ok
    from learning import final_groups

    run_dir, done = tiny_regime_2_steps
    assert_ok(done)
    groups = final_groups(run_dir, "tiny-bpe", "synthetic-arith", "train", limit=40)
    assert set(groups) == {"add", "sub"} and all(0.0 <= v <= 1.0 for v in groups.values())
    assert groups["add"] > groups["sub"]  # tiny-bpe's strong family, after 2 steps
    assert (run_dir / "full-train" / "tiny-bpe.json").exists()  # cached: a second call reads it
    assert final_groups(run_dir, "tiny-bpe", "synthetic-arith", "train", limit=40) == groups


def test_steps_to_reach_the_weak_target_and_the_cost_per_step_by_hand(tmp_path) -> None:
    import json

    from learning import step_costs, steps_to_reach

    assert steps_to_reach([(40, 0.85), (0, 0.0), (20, 0.79)]) == 40  # the first validation at or above 0.8
    assert steps_to_reach([(0, 0.0), (20, 0.5)]) is None
    lines = [{"kind": "train", "policy": "a", "step": 1, "step_time": 1.0, "mutual/judge_s": 0.25,
              "mutual/judgements_wait_s": 0.0},
             {"kind": "train", "policy": "a", "step": 2, "step_time": 2.0, "mutual/judge_s": 0.75,
              "mutual/judgements_wait_s": 0.5},
             {"kind": "eval", "policy": "a", "step": 2, "step_time": 99.0},
             {"kind": "train", "policy": "b", "step": 1, "step_time": 3.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert step_costs(tmp_path) == {"a": {"step_time": 1.5, "mutual/judge_s": 0.5, "mutual/judgements_wait_s": 0.25},
                                    "b": {"step_time": 3.0}}


def test_a_stopped_run_is_resumed_and_a_new_one_started(tmp_path: Path) -> None:
    """A run stopped mid-way (its folder has config.yaml, no summary.json) continues from its checkpoint with its own
    settings; a folder without settings (a start that failed, or none) is trained from the start."""
    from learning import run_command

    run_dir = tmp_path / "byte-kd-seed2"
    fresh = run_command("tiny", "byte-kd", 2, run_dir, 40, ["--set", "x=1"])
    assert fresh[2:] == ["mutualrl", "train", "--pool", "tiny", "--regime", "byte-kd", "--seed", "2", "-o",
                         str(run_dir), "--overwrite", "--set", "x=1", "--max-steps", "40"]
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("pool: {}\n")
    assert run_command("tiny", "byte-kd", 2, run_dir, 40, ["--set", "x=1"])[2:] == [
        "mutualrl", "train", "--resume", "-o", str(run_dir)]

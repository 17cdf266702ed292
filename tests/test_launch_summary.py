"""End-of-run summary: per-group rows, rescue log-prob change, and the run-vs-baseline comparison."""

from __future__ import annotations

import pytest
from rich.console import Console

from mutualrl.launch.rundir.summary import (
    compare_summaries,
    print_comparison,
    print_summary,
    rescue_logprob_change,
    rescue_windows_note,
    rescue_windows_text,
)


def _summary(regime, bpe_groups, sp_groups, **extra):
    def policy(groups):
        after = sum(groups.values()) / len(groups)
        return {"model": "m", "steps": 4, "eval_before": 0.5, "eval_after": after, "train_reward_first": 0.1,
                "train_reward_last": 0.2, "groups_before": {g: 0.5 for g in groups}, "groups_after": groups, **extra}

    return {"pool": "tiny", "regime": regime, "seed": 3, "run_dir": f"runs/{regime}", "seconds": 1.0,
            "policies": {"tiny-bpe": policy(bpe_groups), "tiny-sp": policy(sp_groups)}}


def test_rescue_logprob_change_averages_each_end():
    assert rescue_logprob_change([]) == {}
    got = rescue_logprob_change([(1, -8.0), (2, -6.0), (3, -4.0), (4, -2.0)], window=2)
    assert got == {"rescue_logp_first": -7.0, "rescue_logp_last": -3.0, "rescue_logp_first_steps": [1, 2],
                   "rescue_logp_last_steps": [3, 4]}


def test_rescue_windows_never_overlap_on_a_short_run():
    """Issue 27: 8 logged steps under a window of 10 gave the same mean twice although the values moved."""
    logged = [(step, -10.0 + step) for step in range(1, 9)]
    got = rescue_logprob_change(logged, window=10)
    assert got["rescue_logp_first_steps"] == [1, 4] and got["rescue_logp_last_steps"] == [5, 8]
    assert got["rescue_logp_first"] == -7.5 and got["rescue_logp_last"] == -3.5
    assert rescue_windows_text(got) == "steps 1-4 → 5-8"
    odd = rescue_logprob_change([(2, -5.0), (4, -4.0), (6, -1.0)], window=10)  # the middle step is in neither
    assert (odd["rescue_logp_first"], odd["rescue_logp_last"]) == (-5.0, -1.0)
    assert rescue_windows_text(odd) == "steps 2 → 6"
    assert rescue_windows_text(rescue_logprob_change([(3, -2.0)])) == "step 3 only"
    long = rescue_logprob_change([(step, float(step)) for step in range(1, 31)], window=3)
    assert (long["rescue_logp_first"], long["rescue_logp_last"]) == (2.0, 29.0)
    assert rescue_windows_note({"a": long, "b": long}).endswith("mean over logged steps 1-3 → 28-30")
    assert rescue_windows_note({"a": long, "b": got}).endswith("steps 1-3 → 28-30; b steps 1-4 → 5-8")


def test_comparison_rows_per_policy_and_group_with_difference():
    run = _summary("sgt", {"add": 0.9, "sub": 0.6}, {"add": 0.7, "sub": 1.0})
    base = _summary("standalone", {"add": 0.95, "sub": 0.0}, {"add": 0.0, "sub": 1.0})
    cmp = compare_summaries(run, base)
    rows = {(r["policy"], r["group"]): r for r in cmp["rows"]}
    assert set(rows) == {(p, g) for p in ("tiny-bpe", "tiny-sp") for g in ("all", "add", "sub")}
    assert rows[("tiny-bpe", "sub")]["difference"] == 0.6
    assert abs(rows[("tiny-bpe", "add")]["difference"] + 0.05) < 1e-12
    assert abs(rows[("tiny-sp", "all")]["difference"] - 0.35) < 1e-12
    assert cmp["regime"] == "sgt" and cmp["baseline_regime"] == "standalone" and cmp["seed"] == 3


def test_summary_and_comparison_print_every_group():
    run = _summary("sgt", {"add": 0.9, "sub": 0.6}, {"add": 0.7, "sub": 1.0}, sgt_rescues=12,
                   rescue_logp_first=-9.5, rescue_logp_last=-1.25, rescue_logp_first_steps=[1, 3],
                   rescue_logp_last_steps=[28, 30])
    base = _summary("standalone", {"add": 0.95, "sub": 0.0}, {"add": 0.0, "sub": 1.0})
    console = Console(record=True, width=200)
    print_summary(run, console)
    print_comparison(compare_summaries(run, base), console)
    text = console.export_text()
    assert "-9.50 → -1.25" in text and "12" in text
    assert "mean over logged steps 1-3 → 28-30" in text
    assert "+0.600" in text and "-0.050" in text and "+0.700" in text
    assert "mutualrl plot runs/sgt runs/standalone" in text


def test_trained_steps_come_from_the_trainer_state_not_the_logged_rows(tmp_path):
    import json

    from mutualrl.launch.rundir.summary import trained_steps
    from mutualrl.run_folder import RunPaths

    paths = RunPaths(tmp_path)
    assert trained_steps(paths, "a", logged=0) == 0  # no final state yet: what was logged
    paths.final_model("a").mkdir(parents=True)
    (paths.final_model("a") / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    assert trained_steps(paths, "a", logged=0) == 4  # logging_steps > max_steps logs no row


def test_policy_names_are_whole_in_both_tables_at_80_columns():
    """A new user's 80-column terminal showed 'tiny-…' twice in the end-of-run table (the SGT columns took the
    width) and in the plot summary: the name columns are as wide as the names, the numbers' columns narrow."""
    from mutualrl.cli.plot_cmd import summary_table

    run = _summary("sgt", {"add": 1.0, "sub": 0.2}, {"add": 0.4, "sub": 0.9}, sgt_rescues=12, rescue_logp_first=-9.5,
                   rescue_logp_last=-1.25, rescue_logp_first_steps=[1, 3], rescue_logp_last_steps=[28, 30])
    base = _summary("standalone", {"add": 0.95, "sub": 0.0}, {"add": 0.0, "sub": 1.0})
    console = Console(record=True, width=80)
    print_summary(run, console)
    print_comparison(compare_summaries(run, base), console)
    rows = [{"run": regime, "policy": policy, "first": 0.125, "first_step": 0, "final": 0.375, "final_step": 10,
             "best": 0.375, "last_train_reward": 0.25}
            for regime in ("sgt", "standalone (tiny-sgt-long-folder)") for policy in ("tiny-bpe", "tiny-sp")]
    console.print(summary_table(rows))
    lines = console.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines)
    for name in ("tiny-bpe", "tiny-sp"):
        assert sum(f"│ {name} " in line for line in lines) == 2 + 2  # the run's table, the comparison, plot x2
    assert "…" not in "\n".join(lines)


def test_a_sharing_regime_that_used_no_peer_sample_says_so():
    """Used shares per step (two peers averaged): step 1 [0, 0], step 2 [0.5, 0], step 3 [0, 0]: mean (0 + .25 + 0)
    / 3 = 0.0833, none in 2 of 3 steps: a warning line; a run that used samples in most steps has none."""
    from mutualrl.launch.rundir.summary import peer_sample_use, unused_sharing_warnings

    rows = [{"hacpo/from/a/used_share": a, "hacpo/from/b/used_share": b} for a, b in ((0, 0), (0.5, 0), (0, 0))]
    use = peer_sample_use(rows)
    assert use == {"peer_samples_used": pytest.approx(0.25 / 3), "steps_with_peer_figures": 3,
                   "steps_without_peer_samples": 2}
    assert unused_sharing_warnings("hacpo", {"p": use}) == ["hacpo used 8% of peer samples for p (none in 2 of 3 "
                                                            "steps)"]
    never = peer_sample_use([{"hacpo/from/a/used_share": 0.0}] * 2)
    assert unused_sharing_warnings("hacpo", {"p": never}) == [
        "hacpo used 0% of peer samples for p (none in 2 of 2 steps): no peer sample moved its gradient, though hacpo "
        "still ran (not standalone GRPO)"]
    mostly = peer_sample_use([{"prp/from/a/used_share": 1.0}] * 2 + [{"prp/from/a/used_share": 0.0}])
    assert unused_sharing_warnings("prp", {"p": mostly}) == [] and peer_sample_use([{"reward_mean": 1}]) == {}
    # OPD's used share (the learner's rollouts a peer's judgement changed): a gate on 2 % of them in one step of three
    opd = peer_sample_use([{"opd/from/a/used_share": 0.02}] + [{"opd/from/a/used_share": 0.0}] * 2)
    assert opd["peer_samples_used"] == pytest.approx(0.02 / 3)
    assert unused_sharing_warnings("opd", {"p": opd}) == ["opd used 1% of peer samples for p (none in 2 of 3 steps)"]

"""Saying when there is no signal (issue 39): several steps in which every group's K rewards are equal are said
once, in the worker's log (with one completion and its reward) and on the launcher's progress display."""

from __future__ import annotations

import io

import pytest

from rich.console import Console

from mutualrl.launch.supervise.runner import PoolRunner
from mutualrl.launch.supervise.worker_output import stop_reason
from mutualrl.training.reward_signal_watch import NoRewardError, RewardSignalWatch, group_shares, no_signal_note


def test_group_shares_count_flat_and_all_fail_groups():
    assert group_shares([0, 0, 1, 1, 0, 1], 2) == (2 / 3, 1 / 3)
    assert group_shares([float("nan")] * 4, 2) == (0.0, 0.0)


def test_the_worker_says_it_once_after_three_flat_steps_with_a_completion():
    watch = RewardSignalWatch("p")
    flat, spread = [0.0] * 8, [0.0, 1.0] * 4
    assert watch.observe(flat, 4, "x", 0.0)[1] is None and watch.observe(spread, 4, "x", 0.0)[1] is None
    assert watch.observe(flat, 4, "x", 0.0)[1] is None and watch.observe(flat, 4, "x", 0.0)[1] is None
    failed, note = watch.observe(flat, 4, "The answer is 7", 0.0)
    assert failed == 1.0 and "no learning signal for 3 steps" in note and "every group all failed" in note
    assert "'The answer is 7' -> reward 0" in note and "no completion scored above 0" in note
    assert "format" not in note  # what was seen, not a guessed cause
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
    assert text.count("no learning signal") == 1 and "75% of groups all failed" in text and "logs/a.log" in text
    assert "the other 25% every completion got the same reward above 0" in text and "format" not in text


def test_the_designed_blind_spot_is_described_not_blamed_on_the_format():
    """The tiny demo: strong-family groups all succeed, weak-family groups all fail: flat, but rewards were earned."""
    watch = RewardSignalWatch("tiny-bpe", stop_after=30)
    for _ in range(2):
        assert watch.observe([1.0] * 4 + [0.0] * 4, 4, "7", 1.0)[1] is None
    failed, note = watch.observe([1.0] * 4 + [0.0] * 4, 4, "7", 1.0)
    assert failed == 0.5 and "50% of groups all failed" in note and "above 0" in note
    assert "format" not in note and "no completion scored" not in note


def test_a_policy_with_no_reward_for_n_steps_is_stopped_with_one_completion():
    watch = RewardSignalWatch("p", stop_after=4)
    for _ in range(3):
        watch.observe([0.0] * 8, 4, "????", 0.0)
    watch.observe([0.0] * 7 + [1.0], 4, "7", 1.0)  # one completion scored: the count starts again
    for _ in range(3):
        watch.observe([0.0] * 8, 4, "????", 0.0)
    with pytest.raises(NoRewardError) as err:
        watch.observe([0.0] * 8, 4, "????", 0.0)
    message = str(err.value)
    assert "\n" not in message and message.startswith("policy p: no completion scored above 0 in 4 steps in a row")
    assert "task.stop_after_no_reward_steps=4" in message and "'????' -> reward 0" in message


def test_a_penalty_only_reward_with_spread_is_not_stopped():
    """Rewards that are never above 0 but differ inside a group (a length penalty) still give GRPO a signal."""
    watch = RewardSignalWatch("p", stop_after=2)
    for _ in range(10):
        watch.observe([-1.0, -0.5, -1.0, -0.2] * 2, 4, "a long answer", -0.5)


@pytest.mark.parametrize("off", [None, 0])
def test_the_stop_can_be_turned_off(off):
    watch = RewardSignalWatch("p", stop_after=off)
    for _ in range(100):
        watch.observe([0.0] * 8, 4, "????", 0.0)


def test_the_launcher_gives_the_stop_as_the_reason(tmp_path):
    log = tmp_path / "p.log"
    log.write_text("INFO training\nerror: policy p: no completion scored above 0 in 30 steps in a row, so it was "
                   "stopped (task.stop_after_no_reward_steps=30; 0 turns this off). One completion: '?' -> reward 0\n")
    assert stop_reason(log).startswith("policy p: no completion scored above 0 in 30 steps")
    log.write_text("error: something else\n")
    assert stop_reason(log) is None


def test_the_default_stops_after_a_few_dozen_steps_and_resume_may_change_it():
    from mutualrl.config.schema import TaskConfig
    from mutualrl.launch.rundir.resume import config_changes

    assert 10 <= TaskConfig().stop_after_no_reward_steps <= 60
    refused, allowed = config_changes({"task": {"stop_after_no_reward_steps": 30}},
                                      {"task": {"stop_after_no_reward_steps": 0}})
    assert refused == [] and len(allowed) == 1


def test_a_penalty_only_reward_that_reached_its_best_is_not_stopped():
    """A reward of -1 or 0 (0 the best: a format penalty) whose completions all reached 0 has learnt, not failed."""
    watch = RewardSignalWatch("p", stop_after=2)
    watch.observe([-1.0] * 8, 4, "no", -1.0)
    for _ in range(10):
        watch.observe([0.0] * 8, 4, "<answer>7</answer>", 0.0)
    with pytest.raises(NoRewardError):  # the same reward at -1 all along is stopped
        watch = RewardSignalWatch("p", stop_after=2)
        for _ in range(2):
            watch.observe([-1.0] * 8, 4, "no", -1.0)


def test_a_resumed_run_remembers_the_lower_rewards_it_logged():
    watch = RewardSignalWatch("p", stop_after=2, lowest=-0.75)  # the trainer's log_history before the resume
    for _ in range(10):
        watch.observe([0.0] * 8, 4, "<answer>7</answer>", 0.0)


def test_a_policy_whose_peers_scored_is_not_stopped():
    """SGT rescues a policy that scores nothing with its peers' successes (its designed blind spot); PRP adds them."""
    watch = RewardSignalWatch("p", stop_after=2)
    for _ in range(10):
        watch.observe([0.0] * 8, 4, "?", 0.0, peers_scored=True)
    with pytest.raises(NoRewardError):
        watch.observe([0.0] * 8, 4, "?", 0.0)
        watch.observe([0.0] * 8, 4, "?", 0.0)


def test_a_peer_round_scored_when_a_row_is_above_0():
    import pyarrow as pa

    from mutualrl.regimes.core.adapter import any_scored

    nan = float("nan")
    assert any_scored({"a": pa.table({"reward": [0.0, nan]}), "b": pa.table({"reward": [nan, 0.5]})})
    assert not any_scored({"a": pa.table({"reward": [0.0, nan, -1.0]})}) and not any_scored({})
    assert not any_scored({"a": pa.table({"reward": pa.array([], pa.float64())})})


def blind_step_watched(adapters, peer_rewards, stop_after, steps):
    """tiny-sp publishes one step with ``peer_rewards``, tiny-bpe scores 0 on every row of its own and its
    trainer's no-reward watch (``MutualGRPOTrainer.watch_signal``, the worker's code) sees ``steps`` such steps."""
    from types import SimpleNamespace

    from mutualrl.training.trainer import MutualGRPOTrainer
    from test_regimes_seam import step_of

    learner, peer = adapters["tiny-bpe"], adapters["tiny-sp"]
    peer_out, peer_step = step_of(peer.trainer.processing_class, [" 4", " 5", " 4", " 3"], peer_rewards)
    peer.publish_records(peer_out, peer_step, {})
    out, rollouts = step_of(learner.trainer.processing_class, ["?", "?", "?", "?"], [0.0] * 4)
    learner.process_step(out, rollouts)
    learner.config.task.stop_after_no_reward_steps = stop_after
    trainer = SimpleNamespace(signal_watch=None, state=SimpleNamespace(log_history=[]), policy_name="tiny-bpe",
                              regime=learner, record_metrics=learner.trainer.record_metrics,
                              accelerator=SimpleNamespace(is_main_process=True))
    for _ in range(steps):
        MutualGRPOTrainer.watch_signal(trainer, rollouts)
    return learner.trainer.recorded


@pytest.mark.slow  # over 2 s: a step of THL over two real vocabularies
def test_sgt_rescuing_a_policy_blind_on_every_prompt_is_not_stopped(thl_tokenizers, tmp_path):
    """tiny-bpe answers every prompt `?` (its blind spot) and SGT rescues it with tiny-sp's answers: the stop
    after 2 unscored steps does not fire while they are rescued; with no peer success it does."""
    from mutualrl.training.reward_signal_watch import NoRewardError
    from test_regimes_seam import pool_of

    recorded = blind_step_watched(pool_of(tmp_path / "rescued", thl_tokenizers, "sgt"), [0.0, 1.0, 1.0, 0.0],
                                  stop_after=2, steps=3)
    assert recorded[("train", "sgt/rescues")][0] > 0  # the step it scored nothing in was rescued
    with pytest.raises(NoRewardError, match="no completion scored above 0 in 2 steps"):
        blind_step_watched(pool_of(tmp_path / "alone", thl_tokenizers, "sgt"), [0.0] * 4, stop_after=2, steps=3)

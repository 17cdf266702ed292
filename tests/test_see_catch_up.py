"""see.catch_up: a persistently slow policy skips rounds so its peers stop waiting (docs/see.md "Catching up")."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM
from trl import GRPOConfig

from mutualrl.assets.tokenizers import load_tokenizer
from mutualrl.config import load_run_config
from mutualrl.config.typed import ConfigError
from mutualrl.errors import UsageError
from mutualrl.see.consumption_log import LogTail, append_row, log_path, read_consumption
from mutualrl.see.exchange import ExperienceExchange
from mutualrl.see.async_rounds.staleness import catch_up_target, choose_peer_round, round_seconds
from see_synthetic import synthetic_batch
from mutualrl.regimes.core.adapter import RegimeAdapter
from mutualrl.see.rounds import round_stride
from mutualrl.see.async_rounds.consumption import BoundedConsumption
from mutualrl.training.catch_up import CatchUpTrainer, trainer_class
from mutualrl.training.trainer import MutualGRPOTrainer
from tiny_models import build_tiny_lm

POLICIES = ["fast", "slow", "other"]


def client(root, policy, timeout=5.0):
    return ExperienceExchange(root, "run", policy, policies=POLICIES, barrier_timeout_s=timeout, poll_interval_s=0.01)


def publish(exchange, *steps):
    for step in steps:
        exchange.publish(step, synthetic_batch(2, 2, seed=step, prompt_offset=2 * step, with_logps=False))


def skip(root, policy, step, until, run_id="run"):
    append_row(root, policy, {"run_id": run_id, "kind": "skip", "step": step, "until": until})


# -- the decision (pure) -----------------------------------------------------------------

def test_catch_up_target_by_hand():
    # rho = 3: a peer now on round 5 reaches 8 when our round is committed, 11 at our next one; reading up to
    # S = 2 rounds old, it never waits when we train round 5 + ceil(2*3 - 1) - 2 = 8 now.
    assert catch_up_target(4, 1, 2, 3.0, {"fast": (5, 1.0)}) == 8
    # Rounds 4 optimizer steps apart (a generation spans 4 steps): the same 3 rounds ahead, in steps.
    assert catch_up_target(16, 4, 2, 3.0, {"fast": (20, 1.0)}) == 32
    # rho = 2, S = 1: 5 + ceil(3) - 1 = 7.
    assert catch_up_target(4, 1, 1, 2.0, {"fast": (5, 1.0)}) == 7
    # The furthest-ahead requirement of several faster peers wins.
    assert catch_up_target(4, 1, 2, 3.0, {"a": (5, 1.0), "b": (7, 1.5)}) == max(8, 7 + 3 - 2)


def test_catch_up_target_leaves_jitter_slower_peers_and_unknown_times_alone():
    assert catch_up_target(4, 1, 2, 1.4, {"fast": (6, 1.0)}) == 4  # under 1.5x: the bound absorbs it
    assert catch_up_target(4, 1, 2, 1.0, {"slow": (3, 3.0)}) == 4  # the peer is the slow one
    assert catch_up_target(4, 1, 2, None, {"fast": (9, 1.0)}) == 4  # no own timing yet
    assert catch_up_target(4, 1, 2, 3.0, {"fast": (9, None)}) == 4  # no peer timing yet
    assert catch_up_target(9, 1, 2, 3.0, {"fast": (5, 1.0)}) == 9  # already far enough ahead: never go back


def test_round_seconds_is_the_median_interval_less_waits():
    rows = [{"time": 10.0, "wait_s": 0.0}, {"time": 13.0, "wait_s": 0.5}, {"time": 15.0, "wait_s": 0.0},
            {"time": 20.0, "wait_s": 2.0}]
    assert round_seconds(rows) == pytest.approx(2.5)  # intervals 2.5, 2.0, 3.0
    assert round_seconds(rows[:1]) is None
    assert round_seconds([{"step": 1}, {"step": 2}]) is None  # rows of an older version carry no time


def test_round_stride_needs_whole_optimizer_steps_per_generation():
    class Args:
        steps_per_generation, num_iterations, gradient_accumulation_steps = 4, 1, 1

    assert round_stride(Args, required=True) == 4
    Args.gradient_accumulation_steps = 4
    assert round_stride(Args, required=True) == 1
    Args.gradient_accumulation_steps = 3
    assert round_stride(Args, required=False) == 1
    with pytest.raises(UsageError, match="multiple of gradient_accumulation_steps"):
        round_stride(Args, required=True)


# -- the log -------------------------------------------------------------------------------

def test_log_tail_reads_appends_incrementally_and_skips_a_half_written_line(tmp_path):
    tail = LogTail(tmp_path, "slow", "run")
    assert tail.read_rows() == [] and not tail.skipped(3)
    append_row(tmp_path, "slow", {"run_id": "run", "step": 0, "peer_step": 0, "time": 1.0, "wait_s": 0.0})
    skip(tmp_path, "slow", 1, 4)
    skip(tmp_path, "slow", 9, 12, run_id="an-earlier-run")
    with log_path(tmp_path, "slow").open("a") as fh:
        fh.write('{"run_id": "run", "kind": "skip", "step": 4, "unt')  # being appended right now
    assert [r["step"] for r in tail.read_rows()] == [0]
    assert [tail.skipped(s) for s in range(6)] == [False, True, True, True, False, False]
    assert tail.skipped_past(3) and not tail.skipped_past(4) and not tail.skipped(10)
    with log_path(tmp_path, "slow").open("a") as fh:
        fh.write('il": 6}\n')
    assert tail.skipped(5) and not tail.skipped(6)
    assert [r["step"] for r in read_consumption(tmp_path, "slow", run_id="run", kind="skip")] == [1, 4]
    assert [r["step"] for r in read_consumption(tmp_path, "slow")] == [0]


# -- readers of a policy that skips --------------------------------------------------------

def test_a_skipped_round_counts_as_reached_but_gives_no_data(tmp_path):
    fast, slow = client(tmp_path, "fast", timeout=0.3), client(tmp_path, "slow")
    publish(fast, 3, 4, 5)
    publish(slow, 2)
    logs = {"slow": LogTail(tmp_path, "slow", "run")}
    # Without the skip, slow (newest 2) is more than S=2 behind round 5's window [3, 4, 5]: the wait times out.
    with pytest.raises(Exception, match="slow"):
        choose_peer_round(fast, [3, 4, 5], ["slow"], 2, last_consumed=2, peer_logs=logs)
    skip(tmp_path, "slow", 3, 7)
    started = time.monotonic()
    chosen = choose_peer_round(fast, [3, 4, 5], ["slow"], 2, last_consumed=2, peer_logs=logs)
    assert time.monotonic() - started < 0.25
    assert chosen.peer_step is None and not chosen.waited
    publish(slow, 7)
    later = choose_peer_round(fast, [5, 6, 7], ["slow"], 2, last_consumed=2, peer_logs=logs)
    assert (later.peer_step, later.age, later.peers) == (7, 0, None)


def test_a_wait_ends_when_the_awaited_peer_skips_the_round(tmp_path):
    fast, slow = client(tmp_path, "fast", timeout=5.0), client(tmp_path, "slow")
    publish(fast, 3, 4, 5)
    publish(slow, 1)
    threading.Timer(0.3, skip, (tmp_path, "slow", 2, 8)).start()
    started = time.monotonic()
    chosen = choose_peer_round(fast, [3, 4, 5], ["slow"], 2, last_consumed=1,
                               peer_logs={"slow": LogTail(tmp_path, "slow", "run")})
    assert 0.25 <= time.monotonic() - started < 4.0
    assert chosen.waited and chosen.peer_step is None
    assert fast.wait_for(3, ["slow"], arrived=lambda p: True) == {"slow": []}


def test_with_three_policies_a_round_one_peer_skipped_is_read_from_the_other(tmp_path):
    fast, slow, other = client(tmp_path, "fast"), client(tmp_path, "slow"), client(tmp_path, "other")
    publish(fast, 4, 5, 6)
    publish(other, 4, 5, 6)
    publish(slow, 4)
    skip(tmp_path, "slow", 5, 9)
    logs = {p: LogTail(tmp_path, p, "run") for p in ("slow", "other")}
    chosen = choose_peer_round(fast, [4, 5, 6], ["slow", "other"], 2, last_consumed=None, peer_logs=logs)
    assert (chosen.peer_step, chosen.age, chosen.peers) == (6, 0, ("other",))
    # Round 4 both committed: read from both once 5 and 6 are consumed... they are newer, so 4 is never revisited.
    assert choose_peer_round(fast, [4, 5, 6], ["slow", "other"], 2, last_consumed=6, peer_logs=logs).peer_step is None


# -- the decision in the pool: rank 0 logs, replays ----------------------------------------

def test_rank0_skips_a_span_logs_it_and_a_replay_repeats_it(tmp_path):
    see = tmp_path / "see"
    slow, fast = client(see, "slow"), client(see, "fast")
    consumption = BoundedConsumption(slow, ["fast"], max_staleness=2, on_peer_failure="stop", catch_up=True)
    for step in range(2):  # slow takes 3 s per round, fast 1 s
        append_row(see, "slow", {"run_id": "run", "step": step, "peer_step": step, "time": 3.0 * step, "wait_s": 0.0})
    for step in range(6):
        append_row(see, "fast", {"run_id": "run", "step": step, "peer_step": None, "time": 1.0 * step, "wait_s": 0.0})
    # fast is on round 6: train 6 + ceil(5) - 2 = 9 next, skip 2..8; never past the last step.
    assert [consumption.skip_round(s, last_step=20) for s in range(2, 11)] == [True] * 7 + [False, False]
    rows = read_consumption(see, "slow", kind="skip")
    assert [(r["step"], r["until"]) for r in rows] == [(2, 9), (9, 9), (10, 10)]
    assert consumption._plan_skip(2, last_step=5) == 5  # never past the last step
    # A policy restarted into the run reads only its own lines from then on: no timing yet, no skip.
    assert BoundedConsumption(slow, ["fast"], max_staleness=2, catch_up=True)._plan_skip(2, last_step=20) == 2
    del fast

    replay_see = tmp_path / "replay"
    replayed = BoundedConsumption(client(replay_see, "slow"), ["fast"], max_staleness=2, catch_up=False,
                               replay=tmp_path)
    assert replayed.may_skip
    assert [replayed.skip_round(s, last_step=20) for s in range(2, 11)] == [True] * 7 + [False, False]


def test_catch_up_needs_a_staleness_bound():
    with pytest.raises(ConfigError, match="see.catch_up"):
        load_run_config("tiny", regime="sgt", overrides=["see.catch_up=true"])
    config = load_run_config("tiny", regime="sgt", overrides=["see.catch_up=true", "see.max_staleness=2"]).config
    assert config.see.catch_up and config.see.max_staleness == 2


def test_catch_up_refuses_fp16():
    with pytest.raises(ConfigError, match="see.catch_up.*fp16"):
        load_run_config("tiny", regime="sgt", overrides=["see.catch_up=true", "see.max_staleness=2",
                                                          "pool.policies.tiny-sp.grpo.fp16=true"])


def test_restarts_need_continue_and_one_machine():
    with pytest.raises(ConfigError, match="see.max_restarts.*on_peer_failure=continue"):
        load_run_config("tiny", regime="sgt", overrides=["see.max_restarts=1"])
    with pytest.raises(ConfigError, match="one machine"):
        load_run_config("tiny", regime="sgt", overrides=["see.max_restarts=1", "see.on_peer_failure=continue",
                                                          "launch.nodes=2", "launch.main_address=10.0.0.1"])
    config = load_run_config("tiny", regime="sgt", overrides=["see.max_restarts=2",
                                                               "see.on_peer_failure=continue"]).config
    assert config.see.max_restarts == 2


# -- a skipped round changes no parameter, but the data and the schedule move on -------------------

class SkipEveryRound(CatchUpTrainer):
    asked: list[int]

    def skip_round(self, step):
        self.asked = [*getattr(self, "asked", []), step]
        return True


def test_a_skipped_round_leaves_every_parameter_and_advances_the_schedule(tmp_path):
    folder = build_tiny_lm("gpt2", tmp_path / "model")
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b), "prompt_id": f"p{a}-{b}", "task": "t"}
            for a in range(6) for b in range(6)]
    model = AutoModelForCausalLM.from_pretrained(folder)
    initial = [p.detach().clone() for p in model.parameters()]
    config = load_run_config("tiny", regime="standalone", check_grpo=False).config
    regime = RegimeAdapter(config, "tiny-bpe", exchange=None)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, per_device_train_batch_size=8,
                      num_generations=4, max_completion_length=6, max_steps=3, logging_steps=1, report_to=[],
                      learning_rate=5e-3, weight_decay=0.1, lr_scheduler_type="linear", save_strategy="no",
                      disable_tqdm=True, seed=7)
    trainer = SkipEveryRound(model=model, reward_funcs=lambda completions, **kw: [1.0] * len(completions),
                             args=args, train_dataset=Dataset.from_list(rows),
                             processing_class=load_tokenizer("gpt2"), policy_name="tiny-bpe", regime=regime)
    trainer.train()
    assert trainer.asked == [0, 1, 2] and trainer.state.global_step == 3
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), initial, strict=True))  # no decay, no moment
    assert trainer.lr_scheduler.get_last_lr()[0] == pytest.approx(0.0)  # linear schedule ran its 3 steps
    assert not trainer.optimizer.state  # AdamW never stepped a parameter
    assert json.dumps(trainer.state.log_history)  # logging went on


def test_only_a_run_that_may_skip_rounds_gets_the_trainer_that_skips():
    lock_step = load_run_config("tiny", regime="sgt", check_grpo=False).config.see
    assert trainer_class(lock_step) is MutualGRPOTrainer
    assert "training_step" not in vars(MutualGRPOTrainer)  # the paper's path: TRL's own step
    catching_up = load_run_config("tiny", regime="sgt", overrides=["see.max_staleness=2", "see.catch_up=true"],
                                  check_grpo=False).config.see
    assert trainer_class(catching_up) is CatchUpTrainer


def test_a_rejoin_line_makes_peers_forget_what_the_policy_did_before(tmp_path):
    from mutualrl.see.async_rounds.staleness import has_reached
    from mutualrl.see.async_rounds.consumption import rejoin_pool

    fast, slow = client(tmp_path, "fast", timeout=0.3), client(tmp_path, "slow")
    publish(slow, *range(11))  # the crashed run got to round 10 ...
    skip(tmp_path, "slow", 11, 14)
    log = LogTail(tmp_path, "slow", "run")
    assert has_reached(fast, "slow", 12, log)
    slow.mark_policy_failed("killed")
    rejoin_pool(slow, str(tmp_path / "checkpoint-2"), stride=1)  # ... and restarts from checkpoint 2
    assert slow.keep_committed and fast.raise_if_failed("slow", 3) is None
    assert not has_reached(fast, "slow", 5, log) and not log.skipped(12)  # kept shards do not count
    append_row(tmp_path, "slow", {"run_id": "run", "step": 5, "peer_step": 5, "time": 1.0, "wait_s": 0.0})
    assert has_reached(fast, "slow", 5, log) and not has_reached(fast, "slow", 6, log)
    assert [r["kind"] for r in read_consumption(tmp_path, "slow", kind="rejoin")] == ["rejoin"]
    with pytest.raises(UsageError, match="round boundary"):
        rejoin_pool(slow, str(tmp_path / "checkpoint-6"), stride=4)


def test_resume_inside_a_skipped_span_keeps_the_part_before_it(tmp_path):
    from mutualrl.see.consumption_log import rollback_log

    skip(tmp_path, "slow", 2, 9)
    append_row(tmp_path, "slow", {"run_id": "run", "step": 9, "peer_step": None})
    rollback_log(tmp_path, 6)
    assert [(r["step"], r["until"]) for r in read_consumption(tmp_path, "slow", kind="skip")] == [(2, 6)]
    assert read_consumption(tmp_path, "slow") == []

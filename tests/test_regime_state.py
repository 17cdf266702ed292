"""A regime's running state goes with each checkpoint (training/regime_state.py): a learner resumed from it takes the
step an uninterrupted one takes (issue 77: HACPO's capability window restarted from what the resumed process had
seen). In process, through the seam's fake trainer over a real SEE, for every built-in regime; end to end: HACPO
stopped by SIGTERM and resumed, against the same run not stopped, byte for byte (tests/test_train_e2e.py's SIGTERM
test), and every other regime ended at step 1 and resumed (tests/test_resume_every_regime.py)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from mutualrl.config import load_run_config
from mutualrl.errors import UsageError
from mutualrl.regimes.core.registry import get_regime
from mutualrl.see.exchange import ExperienceExchange
from mutualrl.training.adapters import adapter_class
from mutualrl.training.regime_state import REGIME_STATE_NAME, keeps_state, load_regime_state, save_regime_state
from test_regimes_seam import BUILTIN, POLICIES, VOCAB, FakeTrainer, padded, step_of

LEARNER, PEER = "tiny-sp", "tiny-bpe"
# Two steps of 2 prompts x K = 2: the learner fails p0 at the first (SGT rescues it from the peer), and the policies'
# mean rewards change from one step to the next (HACPO's capabilities, Eq. 9, then depend on the step before).
STEPS = (((" 2", " 7", " 4", " 9"), (0.0, 0.0, 1.0, 0.0), (" 5", " 4", " 4", " 3"), (0.0, 1.0, 1.0, 0.0)),
         ((" 4", " 4", " 4", " 9"), (1.0, 1.0, 1.0, 0.0), (" 4", " 5", " 4", " 3"), (1.0, 0.0, 0.0, 0.0)))


@pytest.fixture(scope="module")
def tokenizers(thl_tokenizers):
    """Each tiny vocabulary padded once: the adapters share it (and THL its byte table, built once per object)."""
    return {name: padded(thl_tokenizers[VOCAB[name]]) for name in POLICIES}


def adapter_of(folder, tokenizers, regime, policy, overrides=()):
    """One policy's adapter over the SEE in ``folder`` (test_regimes_seam's ``pool_of``, for one policy): a new
    process of that policy, bound to a FakeTrainer."""
    config = load_run_config("tiny", regime=regime, overrides=list(overrides), check_grpo=False).config
    spec = get_regime(regime)
    exchange = ExperienceExchange(folder, "run", policy, policies=POLICIES, barrier_timeout_s=10.0,
                                  poll_interval_s=0.01)
    adapter = adapter_class(spec)(config, policy, exchange, spec=spec)
    adapter.bind(FakeTrainer(tokenizers[policy]))
    return adapter


def pool_of(folder, tokenizers, regime, overrides=()):
    return {policy: adapter_of(folder, tokenizers, regime, policy, overrides) for policy in POLICIES}


def take_step(learner, peer, step: int, steps=STEPS):
    """The peer publishes step ``step`` of ``steps``, then the learner processes its own: the batch it trains on
    and the metrics it recorded at this step."""
    own_texts, own_rewards, peer_texts, peer_rewards = steps[step]
    for adapter in (learner, peer):
        adapter.trainer.state.global_step = step
    peer_out, peer_rollouts = step_of(peer.trainer.processing_class, peer_texts, peer_rewards)
    peer.publish_records(peer_out, dataclasses.replace(peer_rollouts, step=step), {})
    out, rollouts = step_of(learner.trainer.processing_class, own_texts, own_rewards)
    before = {key: len(values) for key, values in learner.trainer.recorded.items()}
    batch = learner.process_step(out, dataclasses.replace(rollouts, step=step))
    metrics = {key: values[before.get(key, 0):] for key, values in learner.trainer.recorded.items()
               if not key[1].startswith("mutual/")}  # the regime's own figures, not the stages' seconds
    return batch, metrics


def same(a, b) -> bool:
    """Two batches (or metric lists) equal bit for bit, NaN equal to NaN."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)) \
            and torch.equal(a.isnan(), b.isnan()) if a.is_floating_point() else torch.equal(a, b)
    try:
        np.testing.assert_equal(a, b)
    except AssertionError:
        return False
    return True


@pytest.mark.slow  # several seconds a regime: outside the fast tier
@pytest.mark.parametrize("regime", BUILTIN)
def test_a_learner_resumed_from_its_checkpoints_regime_state_takes_the_uninterrupted_step(regime, tokenizers, tmp_path):
    """Failed before for HACPO: the resumed learner's capability window held only the step it had seen (its second
    step's ``hacpo/capability`` 0.75 where the uninterrupted learner's is 0.5, ``capability_ratio`` 0.33 for 0.75,
    and other advantages). Every other regime keeps no state that changes a step (SGT's is its rescue counter)."""
    straight = pool_of(tmp_path / "straight", tokenizers, regime)
    stopped = pool_of(tmp_path / "stopped", tokenizers, regime)
    take_step(straight[LEARNER], straight[PEER], 0)
    take_step(stopped[LEARNER], stopped[PEER], 0)
    checkpoint = tmp_path / "checkpoint-1"
    checkpoint.mkdir()
    saved = json.loads(save_regime_state(checkpoint, stopped[LEARNER], 1).read_text())
    assert saved["regime"] == regime and saved["policy"] == LEARNER and saved["step"] == 1
    assert (saved["state"] != {}) == keeps_state(stopped[LEARNER])

    # the learner's process ends; a new one over the same exchange takes the state back (the peer goes on)
    resumed = adapter_of(tmp_path / "stopped", tokenizers, regime, LEARNER)
    assert load_regime_state(checkpoint, resumed)
    batch, metrics = take_step(straight[LEARNER], straight[PEER], 1)
    again, again_metrics = take_step(resumed, stopped[PEER], 1)
    assert same(batch, again) and same(metrics, again_metrics)
    if keeps_state(resumed):  # the state matters: resumed without it (as before), the step differs
        fresh = adapter_of(tmp_path / "stopped", tokenizers, regime, LEARNER)
        _, fresh_metrics = take_step(fresh, stopped[PEER], 1)
        assert not same(metrics, fresh_metrics)


# The learner fails p0 at both steps and the peer solves it at both: without a budget SGT rescues p0 twice.
FAILS_TWICE = (STEPS[0], ((" 2", " 7", " 4", " 4"), (0.0, 0.0, 1.0, 1.0), (" 5", " 4", " 4", " 3"), (0.0, 1.0, 1.0, 0.0)))


@pytest.mark.slow  # three pools of adapters: outside the fast tier
def test_sgts_rescue_budget_goes_with_the_checkpoint(tokenizers, tmp_path):
    """Under ``max_rescues_per_prompt: 1`` p0's one lesson is spent at step 0: the uninterrupted learner gates nothing
    at step 1, and so does one resumed from the checkpoint's counts, where a learner without them rescues p0 again."""
    budget = ("regime.sgt.max_rescues_per_prompt=1",)
    straight = pool_of(tmp_path / "straight", tokenizers, "sgt", budget)
    stopped = pool_of(tmp_path / "stopped", tokenizers, "sgt", budget)
    for pool in (straight, stopped):
        _, metrics = take_step(pool[LEARNER], pool[PEER], 0, FAILS_TWICE)
        assert metrics[("train", "sgt/rescues")] == [1.0]
    checkpoint = tmp_path / "checkpoint-1"
    checkpoint.mkdir()
    saved = json.loads(save_regime_state(checkpoint, stopped[LEARNER], 1).read_text())
    assert saved["state"] == {"rescues_total": 1, "rescues_by_prompt": {"p0": 1}}

    resumed = adapter_of(tmp_path / "stopped", tokenizers, "sgt", LEARNER, budget)
    assert load_regime_state(checkpoint, resumed)
    batch, metrics = take_step(straight[LEARNER], straight[PEER], 1, FAILS_TWICE)
    again, again_metrics = take_step(resumed, stopped[PEER], 1, FAILS_TWICE)
    assert same(batch, again) and same(metrics, again_metrics)
    assert metrics[("train", "sgt/rescues")] == [0.0] and "sgt_weight" not in batch
    assert metrics[("train", "sgt/over_budget")] == [1.0]  # gated but for the budget: logged, not hidden
    fresh = adapter_of(tmp_path / "stopped", tokenizers, "sgt", LEARNER, budget)
    _, fresh_metrics = take_step(fresh, stopped[PEER], 1, FAILS_TWICE)
    assert fresh_metrics[("train", "sgt/rescues")] == [1.0] and fresh_metrics[("train", "sgt/over_budget")] == [0.0]
    paper = pool_of(tmp_path / "paper", tokenizers, "sgt", ("regime.sgt.max_rescues_per_prompt=null",))
    _, unbudgeted = take_step(paper[LEARNER], paper[PEER], 0, FAILS_TWICE)
    assert ("train", "sgt/over_budget") not in unbudgeted  # the paper's gate logs no budget


@pytest.mark.slow  # two pools of adapters: outside the fast tier
def test_hacpos_window_round_trips_exactly_through_strict_json(tokenizers, tmp_path):
    """The window's floats come back bit for bit in their dtype; a step where a policy scored nothing (NaN) is
    ``null`` in the file (strict JSON) and NaN again; a pool listed in another order on resume gets its columns
    reordered; a window of other policies is refused in one line naming the file."""
    adapters = pool_of(tmp_path, tokenizers, "hacpo")
    learner = adapters[LEARNER]
    order = learner.pool_order
    history = [torch.tensor([1 / 3, math.nan]), torch.tensor([0.1, 0.7]), torch.tensor([0.2, 0.3])]
    learner.capability_history = list(history)
    path = save_regime_state(tmp_path, learner, 3)
    text = path.read_text()
    assert "NaN" not in text and "null" in text
    back = adapters[PEER]  # another adapter of the same pool: the policy name is the file's only other check
    back.policy = LEARNER
    assert load_regime_state(tmp_path, back)
    assert len(back.capability_history) == 3
    for got, want in zip(back.capability_history, history, strict=True):
        assert got.dtype == torch.float32 and same(got, want)

    state = json.loads(text)["state"]
    back.load_state_dict({**state, "policies": order[::-1],
                          "capability_history": [row[::-1] for row in state["capability_history"]]})
    assert all(same(got, want) for got, want in zip(back.capability_history, history, strict=True))

    with pytest.raises(UsageError, match="capability window is of the policies"):
        back.load_state_dict({**state, "policies": ["a", "b"]})
    saved = json.loads(text)
    saved["state"]["dtype"] = "load"  # a tampered name: never a torch function
    path.write_text(json.dumps(saved))
    with pytest.raises(UsageError, match=f"^{path}: .*dtype") as err:
        load_regime_state(tmp_path, back)
    assert "\n" not in str(err.value)


@pytest.mark.slow  # builds a pool of adapters: outside the fast tier
def test_a_checkpoint_of_another_regime_or_damaged_is_refused_and_an_older_one_resumes_afresh(tokenizers, tmp_path,
                                                                                              caplog):
    learner = adapter_of(tmp_path, tokenizers, "hacpo", LEARNER)
    assert not load_regime_state(tmp_path, learner)  # no file: a checkpoint of an older mutualrl
    assert "starts its running state afresh" in caplog.text and learner.capability_history == []
    path = save_regime_state(tmp_path, learner, 1)
    saved = json.loads(path.read_text())
    for damage, words in (({**saved, "regime": "prp"}, "the state of regime 'prp', not 'hacpo'"),
                          ({**saved, "policy": PEER}, f"the state of policy '{PEER}', not '{LEARNER}'"),
                          ({**saved, "state": [1]}, "unreadable regime state"),
                          ({**saved, "format": "x"}, "unreadable regime state")):
        path.write_text(json.dumps(damage))
        with pytest.raises(UsageError, match=words) as err:
            load_regime_state(tmp_path, learner)
        assert str(err.value).startswith(f"{path}: ") and "\n" not in str(err.value)
    path.write_text(json.dumps(saved)[:-5])  # cut short
    with pytest.raises(UsageError, match="unreadable regime state"):
        load_regime_state(tmp_path, learner)
    assert REGIME_STATE_NAME == path.name


def test_a_regime_without_running_state_keeps_none():
    from mutualrl.regimes.core.registry import get_regime
    from mutualrl.training.adapters import adapter_class

    keeping = sorted(name for name in BUILTIN if adapter_class(get_regime(name)).state_dict
                     is not adapter_class(get_regime("standalone")).state_dict)
    assert keeping == ["hacpo", "sgt"]

"""App. "Infrastructure fidelity": the standalone regime is vanilla TRL GRPO, parameter for parameter; so are on-policy
distillation (``opd``) with ``lam: 0``, its composition with SGT's rescue (``opd-sgt``) with ``lam: 0`` and
``rescue_lam: 0``, and next-byte distillation (``byte-kd``) with ``lam: 0``, their whole exchange running (a peer's round, judging it, the peer's judgements of every rollout
read and aligned, the rescue gate firing)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer

from mutualrl.assets.tokenizers import load_tokenizer
from mutualrl.config import load_run_config
from mutualrl.regimes.core.adapter import RegimeAdapter
from mutualrl.regimes.core.trainer_interface import TrainerView
from mutualrl.training.trainer import MutualGRPOTrainer
from tiny_models import build_tiny_lm


def _reward(prompts, completions, answer, **kwargs):
    # Depends on the sampled text, so advantages are non-zero and parameters move.
    return [float(len(c) % 3 == 0) + 0.5 * float(a in c) for c, a in zip(completions, answer, strict=True)]


def _args(out: str) -> GRPOConfig:
    return GRPOConfig(output_dir=out, use_cpu=True, bf16=False, per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=6, max_steps=3, logging_steps=1, report_to=[], learning_rate=5e-3,
                      save_strategy="no", disable_tqdm=True, seed=7)


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_standalone_trainer_matches_vanilla_grpo(tmp_path):
    folder = build_tiny_lm("gpt2", tmp_path / "model")
    tokenizer = load_tokenizer("gpt2")
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b), "prompt_id": f"p{a}-{b}", "task": "t"}
            for a in range(6) for b in range(6)]
    dataset = Dataset.from_list(rows)
    initial = AutoModelForCausalLM.from_pretrained(folder)

    vanilla_model = AutoModelForCausalLM.from_pretrained(folder)
    GRPOTrainer(model=vanilla_model, reward_funcs=_reward, args=_args(str(tmp_path / "v")), train_dataset=dataset,
                processing_class=tokenizer).train()

    mutual_model = AutoModelForCausalLM.from_pretrained(folder)
    config = load_run_config("tiny", regime="standalone", check_grpo=False).config
    mutual = MutualGRPOTrainer(model=mutual_model, reward_funcs=_reward, args=_args(str(tmp_path / "m")),
                               train_dataset=dataset, processing_class=tokenizer, policy_name="tiny-bpe",
                               regime=RegimeAdapter(config, "tiny-bpe", exchange=None))
    mutual.train()
    assert isinstance(mutual, TrainerView)  # the seam a regime sees (regimes/core/trainer_interface.py), complete once training runs

    moved = max((p - q).abs().max().item() for p, q in zip(vanilla_model.parameters(), initial.parameters()))
    diff = max((p - q).abs().max().item() for p, q in zip(vanilla_model.parameters(), mutual_model.parameters()))
    assert moved > 1e-4, "the reference run must actually change the parameters"
    assert diff <= 1e-6
    assert torch.equal(next(vanilla_model.parameters()), next(mutual_model.parameters()))

    # On-policy distillation at lam 0, with the rescue at lam 0 and rescue_lam 0, and next-byte distillation at lam 0
    # (its judges publish no distributions here: the learner's own judging still runs), each with a scripted peer that
    # solves every prompt (so the gates fire on every prompt the learner does not solve) and judges every learner
    # token at -1: bit for bit vanilla GRPO.
    for regime, overrides, gate in (("opd", ["regime.opd.lam=0"], "gate_rate"),
                                    ("opd-sgt", ["regime.opdsgt.lam=0", "regime.opdsgt.rescue_lam=0"], "rescue_rate"),
                                    ("byte-kd", ["regime.bytekd.lam=0", "regime.bytekd.distribution=canonical"],
                                     "gate_rate")):  # exact judging of an untrained model's text: over a minute
        model = AutoModelForCausalLM.from_pretrained(folder)
        trainer = zero_lambda_trainer(regime, overrides, model, tokenizer, dataset, tmp_path / regime)
        peer = threading.Thread(target=scripted_peer, args=(tmp_path / regime / "see", 3), daemon=True)
        peer.start()
        trainer.train()
        peer.join(60)
        gates = [row[f"{regime}/{gate}"] for row in trainer.state.log_history if f"{regime}/{gate}" in row]
        assert len(gates) == 3 and any(g > 0 for g in gates), regime  # the gate fired: the signal was there, times 0
        shares = [row[f"{regime}/judged_share"] for row in trainer.state.log_history if f"{regime}/judged_share" in row]
        assert len(shares) == 3 and all(share == 1.0 for share in shares), regime
        assert all(torch.equal(p, q) for p, q in zip(vanilla_model.parameters(), model.parameters())), regime


def zero_lambda_trainer(regime, overrides, model, tokenizer, dataset, folder) -> MutualGRPOTrainer:
    """The policy ``tiny-bpe`` of the tiny pool under ``regime`` with ``overrides`` (its weights at 0), over a real SEE
    in ``folder/see``."""
    from mutualrl.see.exchange import ExperienceExchange
    from mutualrl.training.adapters import make_regime_adapter

    config = load_run_config("tiny", regime=regime, overrides=overrides, check_grpo=False).config
    exchange = ExperienceExchange(folder / "see", "run", "tiny-bpe", policies=["tiny-bpe", "tiny-sp"],
                                  barrier_timeout_s=60, poll_interval_s=0.01)
    return MutualGRPOTrainer(model=model, reward_funcs=_reward, args=_args(str(folder / "o")), train_dataset=dataset,
                             processing_class=tokenizer, policy_name="tiny-bpe",
                             regime=make_regime_adapter(config, "tiny-bpe", exchange))


def scripted_peer(root, steps: int) -> None:
    """The peer ``tiny-sp`` of :func:`zero_lambda_trainer`, for ``steps`` rounds, through the same SEE calls a policy makes:
    it reads the learner's round, publishes its own (the learner's rollouts as its own, every one solved) and its
    judgements of the learner's rollouts (the learner's tokens and spans, each at -1); no torch, so no random
    stream of the learner's is touched."""
    from mutualrl.regimes.core.judgements import JudgementChannel
    from mutualrl.see.exchange import ExperienceExchange
    from mutualrl.see.records import RolloutBatch

    exchange = ExperienceExchange(root, "run", "tiny-sp", policies=["tiny-bpe", "tiny-sp"], barrier_timeout_s=60,
                                  poll_interval_s=0.01)
    channel = JudgementChannel(exchange, ["tiny-bpe"])
    for step in range(steps):
        table = exchange.gather(step, policies=["tiny-bpe"])["tiny-bpe"]
        columns = {name: table.column(name).to_pylist() for name in ("prompt_id", "sample_index", "prompt_text",
                                                                     "response_text", "response_token_ids",
                                                                     "response_token_spans", "finished")}
        ones = np.ones(table.num_rows, dtype=np.float32)
        exchange.publish(step, RolloutBatch(**columns, reward=ones))
        trace = [[-1.0] * len(ids) for ids in columns["response_token_ids"]]
        channel.publish(step, "tiny-bpe", RolloutBatch(**columns, reward=ones, behaviour_logps=trace))

"""App. "Infrastructure fidelity": the standalone regime is vanilla TRL GRPO, parameter for parameter."""

from __future__ import annotations

import pytest

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer

from mutualrl.assets.tokenizers import load_tokenizer
from mutualrl.config import load_run_config
from mutualrl.regimes.core.adapter import RegimeAdapter
from mutualrl.regimes.core.seam import TrainerView
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
    assert isinstance(mutual, TrainerView)  # the seam a regime sees (regimes/core/seam.py), complete once training runs

    moved = max((p - q).abs().max().item() for p, q in zip(vanilla_model.parameters(), initial.parameters()))
    diff = max((p - q).abs().max().item() for p, q in zip(vanilla_model.parameters(), mutual_model.parameters()))
    assert moved > 1e-4, "the reference run must actually change the parameters"
    assert diff <= 1e-6
    assert torch.equal(next(vanilla_model.parameters()), next(mutual_model.parameters()))

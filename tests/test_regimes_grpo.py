"""Standalone GRPO advantages: hand examples, and bit-identity with TRL 1.16's own code.

TRL computes advantages inside ``GRPOTrainer._generate_and_score_completions`` (no function of its own), so the
tests call that method on a real trainer over a tiny model, with two stand-ins: ``_generate`` (one fixed token per
completion, no sampling) and ``_calculate_rewards`` (the rewards under test). Everything from the rewards to the
advantages is TRL's code as installed, so a TRL upgrade that changes the formula makes these fail; one that moves
the seams makes :func:`test_trl_driver_reaches_trls_advantage_code` fail by name (not the collection).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from _regimes_strategies import NAN, learner_rewards, reward_tensor
from hypothesis import given, settings
from hypothesis import strategies as st

from mutualrl.regimes.core.grpo import group_advantages, reward_scale

EPS = 1e-4


def trl_rewards(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> torch.Tensor:
    """``[B]``: TRL's ``sum_then_normalize`` sum of ``[B, F]`` rewards, NaN where no function scored (the trainer's)."""
    rewards = (rewards_per_func * reward_weights.unsqueeze(0)).nansum(dim=1)  # [B]
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return rewards


@pytest.fixture(scope="module")
def trl_trainer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A vanilla TRL ``GRPOTrainer`` on a one-layer, 8-wide random model (never run: only its advantage code)."""
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from mutualrl.assets.tokenizers import load_tokenizer

    tokenizer = load_tokenizer("gpt2")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=8, intermediate_size=16,
                                         num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1,
                                         max_position_embeddings=32, eos_token_id=tokenizer.eos_token_id))
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("trl-grpo")), use_cpu=True, bf16=False,
                      per_device_train_batch_size=4, num_generations=2, max_completion_length=1, report_to=[],
                      save_strategy="no", disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **_: [0.0] * len(completions), args=args,
                          train_dataset=Dataset.from_list([{"prompt": "1+1="}] * 4), processing_class=tokenizer)
    trainer.model.train()  # the "train" branch: num_generations, not num_generations_eval
    eos = tokenizer.eos_token_id
    trainer._generate = lambda prompts: ([[eos]] * len(prompts), [[eos]] * len(prompts), None, ["x"] * len(prompts),
                                         None, {}, None, None)
    return trainer


@pytest.fixture(scope="module")
def trl_block_advantages(trl_trainer: Any):
    """``(rewards_per_func [B, F], weights [F], k, scale) -> [B]``: TRL's advantages for ``B / k`` groups of ``k``."""

    def advantages(rewards_per_func: torch.Tensor, weights: torch.Tensor, k: int, scale: str) -> torch.Tensor:
        b, f = rewards_per_func.shape
        trl_trainer.num_generations, trl_trainer.scale_rewards = k, scale
        trl_trainer.multi_objective_aggregation = "sum_then_normalize"
        trl_trainer.reward_weights = weights
        trl_trainer.reward_func_names = [f"r{i}" for i in range(f)]  # its per-function metrics
        trl_trainer._calculate_rewards = lambda *_: rewards_per_func.clone()
        return trl_trainer._generate_and_score_completions([{"prompt": "1+1="}] * b)["advantages"]

    return advantages


@pytest.fixture(scope="module")
def trl_advantages(trl_block_advantages):
    """``(rewards [P, K], scale) -> [P, K]``: TRL's advantages for one reward function of weight 1."""

    def advantages(rewards: torch.Tensor, scale_rewards: str) -> torch.Tensor:
        p, k = rewards.shape
        return trl_block_advantages(rewards.reshape(p * k, 1), torch.ones(1), k, scale_rewards).reshape(p, k)

    return advantages


def test_trl_driver_reaches_trls_advantage_code(trl_advantages, trl_block_advantages):
    # The rewards given must be the ones TRL normalises, else the comparisons below test nothing. By hand:
    # group [1, 0, 0, 1]: +-0.5 / (sqrt(1/3) + 1e-4); [3, 1, 2] unscaled: 1, -1, 0; an unscorable row (all NaN): 0.
    s = 0.5 / (math.sqrt(1 / 3) + EPS)
    torch.testing.assert_close(trl_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]]), "group"),
                               torch.tensor([[s, -s, -s, s]]))
    assert trl_advantages(torch.tensor([[3.0, 1.0, 2.0]]), "none").tolist() == [[1.0, -1.0, 0.0]]
    # Two functions of weights 1 and 0.5 are summed before normalising; [NaN, NaN] is unscorable.
    per_func = torch.tensor([[1.0, 2.0], [NAN, 4.0], [0.0, 0.0], [NAN, NAN]])
    torch.testing.assert_close(trl_block_advantages(per_func, torch.tensor([1.0, 0.5]), 4, "none"),
                               torch.tensor([2 - 4 / 3, 2 - 4 / 3, -4 / 3, 0.0]))


def test_hand_example_none_scaling():
    # rewards 3, 1, 2: mean 2 -> advantages 1, -1, 0 (no division).
    a = group_advantages(torch.tensor([[3.0, 1.0, 2.0]]), "none")
    assert a.tolist() == [[1.0, -1.0, 0.0]]


def test_hand_example_group_scaling():
    # Group [1, 0, 0, 1]: mean 0.5, deviations +-0.5, sample variance 4*0.25/3 = 1/3.
    # A = +-0.5 / (sqrt(1/3) + 1e-4).
    # Group [2, 2, 2, 2]: deviations 0, std 0 -> A = 0 / (0 + 1e-4) = 0.
    a = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]]), "group")
    s = 0.5 / (math.sqrt(1 / 3) + EPS)
    torch.testing.assert_close(a, torch.tensor([[s, -s, -s, s], [0.0, 0.0, 0.0, 0.0]]))


def test_hand_example_batch_scaling():
    # Prompts [0, 2] and [4, 6]: group means 1 and 5 -> centred -1, 1, -1, 1.
    # Batch std of the raw rewards 0, 2, 4, 6: mean 3, squared deviations 9+1+1+9 = 20,
    # sample variance 20/3 -> A = +-1 / (sqrt(20/3) + 1e-4).
    a = group_advantages(torch.tensor([[0.0, 2.0], [4.0, 6.0]]), "batch")
    s = 1 / (math.sqrt(20 / 3) + EPS)
    torch.testing.assert_close(a, torch.tensor([[-s, s], [-s, s]]))


def test_nan_rewards_are_left_out_and_get_zero():
    # [1, NaN, 0]: statistics over {1, 0}: mean 0.5, sample std sqrt(0.5); NaN row -> 0.
    # [NaN, 1, NaN]: a single scorable reward has no sample std -> NaN -> 0 for every row.
    # [NaN, NaN, NaN]: nothing scorable -> 0.
    r = torch.tensor([[1.0, NAN, 0.0], [NAN, 1.0, NAN], [NAN, NAN, NAN]])
    a = group_advantages(r, "group")
    s = 0.5 / (math.sqrt(0.5) + EPS)
    torch.testing.assert_close(a, torch.tensor([[s, 0.0, -s], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    # "none": [1, NaN, 0] -> 0.5, 0, -0.5; single scorable 1 - 1 = 0.
    a = group_advantages(r, "none")
    assert a.tolist() == [[0.5, 0.0, -0.5], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]


def test_single_rollout_group_has_zero_std():
    # K = 1: TRL uses std 0, so A = (r - r) / (0 + eps) = 0.
    assert group_advantages(torch.tensor([[0.7], [0.1]]), "group").tolist() == [[0.0], [0.0]]
    assert reward_scale(torch.tensor([[0.7], [0.1]]), "group").tolist() == [[0.0], [0.0]]


def test_eps_is_added_to_the_std():
    # Group [0, 2]: std sqrt(2); with eps = 1 the advantage is 1 / (sqrt(2) + 1).
    a = group_advantages(torch.tensor([[0.0, 2.0]]), "group", eps=1.0)
    torch.testing.assert_close(a, torch.tensor([[-1 / (math.sqrt(2) + 1), 1 / (math.sqrt(2) + 1)]]))


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_matches_trl_on_fixed_batch(scale, trl_advantages):
    r = torch.tensor(
        [[1.0, 0.0, 0.0, 1.0, 1.0], [0.0] * 5, [1.0] * 5, [0.3, NAN, 0.9, 0.9, 0.1], [NAN] * 5, [NAN, 1, NAN, NAN, NAN]]
    )
    assert torch.equal(group_advantages(r, scale), trl_advantages(r, scale))


@pytest.mark.slow  # over 2 s: outside the fast tier
@settings(max_examples=150, deadline=None)
@given(rewards=learner_rewards(), scale=st.sampled_from(["group", "batch", "none"]))
def test_bit_identical_to_trl(trl_advantages, rewards, scale):
    ours = group_advantages(rewards, scale)
    theirs = trl_advantages(rewards, scale)
    assert torch.equal(ours.view(torch.int32), theirs.view(torch.int32)), (rewards, ours, theirs)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), scale=st.sampled_from(["group", "batch", "none"]))
def test_several_weighted_reward_functions_bit_identical_to_trl(trl_block_advantages, data, scale):
    # TRL sums weighted reward functions (NaN-aware) before normalising; trl_rewards does the same.
    p, k, f = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5)), data.draw(st.integers(1, 3))
    per_func = data.draw(reward_tensor((p * k, f)))
    weights = torch.tensor(data.draw(st.lists(st.sampled_from([1.0, 0.5, 2.0, -1.0]), min_size=f, max_size=f)))
    ours = group_advantages(trl_rewards(per_func, weights).reshape(p, k), scale).reshape(-1)
    theirs = trl_block_advantages(per_func, weights, k, scale)
    assert torch.equal(ours.view(torch.int32), theirs.view(torch.int32)), (per_func, weights, ours, theirs)


def test_strided_input_gives_the_same_bits(trl_advantages):
    # A learner slice of a pool is a strided view; the result must not depend on the layout.
    pool = torch.rand(7, 3, 5, generator=torch.Generator().manual_seed(0))
    view = pool[:, 1]
    assert not view.is_contiguous()
    assert torch.equal(group_advantages(view), trl_advantages(view.contiguous(), "group"))


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match=r"rewards must have shape \[P, K\]"):
        group_advantages(torch.zeros(4))
    with pytest.raises(ValueError, match="floating"):
        group_advantages(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="scale_rewards must be one of"):
        group_advantages(torch.zeros(2, 2), "batchwise")

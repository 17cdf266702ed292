"""Paper batch (prompts) -> TRL GRPOConfig fields, checked against TRL's own derivation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mutualrl.config.schema import BatchConfig
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.batching import (
    BatchSizeError,
    apply_batch,
    check_trl_batch,
    derive_batch,
    fits,
    split_across_cpu_ranks,
    trl_generation_batch,
    valid_world_sizes,
)

PAPER = BatchConfig(prompts_per_step=1024, mini_batches_per_step=4, micro_batch_prompts_per_device=2)


def test_paper_numbers_world_size_one():
    d = derive_batch(PAPER, num_generations=5, world_size=1)
    assert (d.per_device_train_batch_size, d.gradient_accumulation_steps, d.steps_per_generation) == (10, 128, 512)
    assert d.generation_batch_size == 1024 * 5
    assert d.optimizer_steps_per_generation == 4


def test_paper_numbers_world_size_two_and_eight():
    d2 = derive_batch(PAPER, num_generations=5, world_size=2)
    assert (d2.per_device_train_batch_size, d2.gradient_accumulation_steps, d2.steps_per_generation) == (10, 64, 256)
    d8 = derive_batch(PAPER, num_generations=5, world_size=8)
    assert (d8.gradient_accumulation_steps, d8.steps_per_generation) == (16, 64)
    # The paper's "sixteen prompts per micro-batch across eight GPUs".
    assert d8.per_device_train_batch_size // 5 * 8 == 16


def test_trl_accepts_the_derived_fields_and_agrees():
    """GRPOConfig (world size 1 here) derives the same generation batch from our fields."""
    from trl import GRPOConfig

    decided, derived = apply_batch({"num_generations": 5}, PAPER, world_size=1)
    grpo = {"num_generations": 5, **decided.fields}
    config = GRPOConfig(output_dir="unused", bf16=False, use_cpu=True, report_to=[], **grpo)
    assert config.generation_batch_size == derived.generation_batch_size == 5120
    assert config.steps_per_generation == 512
    assert config.steps_per_generation // config.gradient_accumulation_steps == 4
    assert trl_generation_batch(grpo, 1) == (5120, 1024)


def test_1024_prompts_do_not_split_over_three_gpus():
    with pytest.raises(BatchSizeError) as err:
        derive_batch(PAPER, num_generations=5, world_size=3, policy="qwen3")
    message = str(err.value)
    assert "policy 'qwen3'" in message
    assert "batch.prompts_per_step (1024)" in message and "batch.micro_batch_prompts_per_device (2)" in message
    assert "1, 2, 4, 8" in message  # suggested device counts
    assert isinstance(err.value, PlacementError)


def test_mini_batches_must_divide_the_micro_batches():
    batch = BatchConfig(prompts_per_step=24, mini_batches_per_step=5, micro_batch_prompts_per_device=2)
    with pytest.raises(BatchSizeError, match="batch.mini_batches_per_step \\(5\\)"):
        derive_batch(batch, num_generations=4, world_size=1)


def test_num_generations_below_two_is_refused():
    with pytest.raises(BatchSizeError, match="num_generations"):
        derive_batch(PAPER, num_generations=1, world_size=1)


def test_batch_none_decides_nothing():
    grpo = {"per_device_train_batch_size": 32, "gradient_accumulation_steps": 1, "num_generations": 4, "seed": 3}
    decided, derived = apply_batch(grpo, None, world_size=1)
    assert decided.fields == {} and decided.dropped == () and decided.notes == []
    assert derived is None


def test_batch_none_still_checks_trl_divisibility():
    with pytest.raises(BatchSizeError, match="divisible by grpo.num_generations \\(5\\)"):
        apply_batch({"per_device_train_batch_size": 8, "num_generations": 5}, None, world_size=1)
    with pytest.raises(BatchSizeError, match="cannot both be set"):
        check_trl_batch({"generation_batch_size": 20, "steps_per_generation": 2, "num_generations": 5}, 1)


def test_derived_fields_replace_recipe_values_with_a_note():
    grpo = {"per_device_train_batch_size": 32, "generation_batch_size": 64, "num_generations": 5}
    decided, _ = apply_batch(grpo, PAPER, world_size=4)
    assert decided.fields == {"per_device_train_batch_size": 10, "gradient_accumulation_steps": 32,
                              "steps_per_generation": 128}  # only the derived fields
    assert decided.dropped == ("generation_batch_size",)
    notes = decided.notes
    assert any("per_device_train_batch_size=32 replaced by 10" in n for n in notes)
    assert any("generation_batch_size dropped" in n for n in notes)


def test_a_batchless_recipe_splits_its_per_device_batch_over_cpu_ranks():
    assert split_across_cpu_ranks({"per_device_train_batch_size": 8}, 1).fields == {}
    decided = split_across_cpu_ranks({"per_device_train_batch_size": 8, "seed": 3}, 2, "p")
    assert decided.fields == {"per_device_train_batch_size": 4}
    assert decided.notes == ["p: 2 CPU ranks x per_device_train_batch_size 4 (= 8 on one rank)"]
    with pytest.raises(BatchSizeError, match="does not split over launch.cpu_processes=3"):
        split_across_cpu_ranks({"per_device_train_batch_size": 8}, 3, "p")


def test_valid_world_sizes():
    assert valid_world_sizes(PAPER, 8) == [1, 2, 4, 8]
    assert not fits(PAPER, 3) and fits(PAPER, 128) and not fits(PAPER, 256)


@settings(max_examples=200, deadline=None)
@given(
    prompts=st.integers(1, 4096),
    minis=st.integers(1, 16),
    micro=st.integers(1, 8),
    k=st.integers(2, 16),
    world=st.integers(1, 16),
)
def test_derivation_identities(prompts, minis, micro, k, world):
    batch = BatchConfig(prompts_per_step=prompts, mini_batches_per_step=minis, micro_batch_prompts_per_device=micro)
    if not fits(batch, world):
        with pytest.raises(BatchSizeError):
            derive_batch(batch, k, world)
        return
    d = derive_batch(batch, k, world)
    # One generation covers prompts x K completions, in `minis` optimizer updates, whole prompt groups.
    assert d.per_device_train_batch_size * world * d.steps_per_generation == prompts * k
    assert d.steps_per_generation == d.gradient_accumulation_steps * minis
    assert d.generation_batch_size % k == 0
    assert trl_generation_batch({**d.grpo_fields(), "num_generations": k}, world) == (prompts * k, prompts)

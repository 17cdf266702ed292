"""The plan's micro-batch: the peer rows PRP and HACPO pool into it, the activations TRL 1.16 really holds (no
full-vocabulary logits: its fused head scores a tile at a time), a per-device batch lowered to fit the card or a
one-line refusal, and the dry run showing both per policy."""

from __future__ import annotations

import pytest
from rich.console import Console

from mutualrl.config.loader import load_run_config
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.batching import trl_generation_batch
from mutualrl.launch.plan.launch_plan import LaunchPlan, make_launch_plan
from mutualrl.launch.plan.render import render_plan
from mutualrl.training.grpo_args import planned_grpo_env, planned_grpo_text


def gpu_plan(tmp_path, recipe, gpu_memory_gib=80.0, regime=None, overrides=()):
    config = load_run_config(recipe, regime=regime, overrides=list(overrides)).config
    return make_launch_plan(config, tmp_path / "run", gpus=8, simulate=True, gpu_memory_gib=gpu_memory_gib,
                            vllm_available=True, dry_run=True)


def test_hacpo_4b_micro_batch_by_hand(tmp_path):
    """Qwen3-4B-Base (36 layers, hidden 2560, 32 heads of 128, 8 KV heads, MLP 9728, q/k norm, vocabulary 151936) at
    the recipe's per_device_train_batch_size 16 = 2 prompts x K 8: HACPO pools the peer's 8 rollouts of each prompt,
    16 + 16 = 32 rows of 1024 + 4096 tokens (n = 163,840 tokens), bf16, gradient checkpointing on. Per token:
      one layer saves  2 RMSNorms (4 + 2) B x 2560 x 2    =  30,720
                       q/k norms (4 + 2) B x (32 + 8) x 128 =  30,720
                       5 x 2 B x 4096 + 4 B x 32         =  41,088
                       SwiGLU 4 x 2 B x 9728             =  77,824
                       its bf16 copy of the mask 2 B x 5120 = 10,240   (190,592)
      backward         final norm 6 x 2560 + 2 gradients 2 x 2 x 2560 + 2 x 2 B x 9728 = 64,512
      the boolean padding mask 1 B x 5120                =   5,120
      kept inputs      36 x 2 B x 2560                   = 184,320
                                                   sum  = 444,544 B per token
      163840 tokens x 444,544 B                         = 72,834,088,960
      head tile 4096 x 32768 x 2 B                      =    268,435,456
      scored tokens 32 x 4096 x 2560 x (2 + 4) B        =  2,013,265,920
      head weight 151936 x 2560 x (4 + 2) B             =  2,333,736,960
                                                   sum  = 77,449,527,296 B = 72.13 GiB
    beside 16.8 GiB of model state and a tenth of an 80 GiB card (55.2 GiB left): lowered to 8 own rows; a 141 GiB
    card keeps the 16."""
    from mutualrl.launch.plan.bounds import micro_batch
    from mutualrl.launch.plan.model_shapes import model_shape

    config = load_run_config("hacpo-qwen3-1.7b-4b").config
    plan = gpu_plan(tmp_path, "hacpo-qwen3-1.7b-4b").policy("qwen3-4b-base")
    full = micro_batch(config, plan, model_shape("Qwen/Qwen3-4B-Base"), own_rows=16)
    assert (full.own_rows, full.peer_rows, full.rescue_rows, full.tokens_per_row) == (16, 16, 0, 5120)
    assert full.activation_gib * 2**30 == pytest.approx(77_449_527_296)
    assert plan.grpo["per_device_train_batch_size"] == 8 and plan.grpo["gradient_accumulation_steps"] == 8
    note = next(n for n in plan.notes if "micro-batch" in n)
    assert "per_device_train_batch_size 16 -> 8" in note and "72.1 GiB" in note and "80 GiB GPU" in note
    assert plan.micro_batch.activation_gib <= 80 * 0.9 - plan.memory.gib_per_device
    big = gpu_plan(tmp_path, "hacpo-qwen3-1.7b-4b", gpu_memory_gib=141.0).policy("qwen3-4b-base")
    assert big.grpo["per_device_train_batch_size"] == 16 and not any("micro-batch" in n for n in big.notes)


@pytest.mark.parametrize("gpu_memory_gib, own_rows", [(80.0, 8), (141.0, 16)])
def test_hacpo_qwen3_4b_llama3b_fits_the_card(tmp_path, gpu_memory_gib, own_rows):
    """The other HACPO recipe: its 4B policy (the same 32 x 5120 micro-batch, 72.1 GiB) is lowered on 80 GiB and kept
    on 141 GiB; every policy's micro-batch then fits beside its model state and the margin."""
    plan = gpu_plan(tmp_path, "hacpo-qwen3-4b-llama3b", gpu_memory_gib=gpu_memory_gib)
    assert plan.policy("qwen3-4b-base").grpo["per_device_train_batch_size"] == own_rows
    for p in plan.policies:
        assert p.micro_batch.activation_gib <= gpu_memory_gib * 0.9 - p.memory.gib_per_device


def test_peer_rows_and_activations_grow_with_the_pool(tmp_path):
    """PRP on 2, 3 and 4 Qwen policies: the same model's micro-batch holds M x its own rows."""
    seen = []
    for pool, m in (("2qwen", 2), ("3qwen", 3), ("4qwen", 4)):
        micro = gpu_plan(tmp_path, pool, regime="prp").policy("qwen2.5-math-1.5b").micro_batch
        assert (micro.own_rows, micro.peer_rows) == (10, 10 * (m - 1))
        seen.append(micro.activation_gib)
    assert seen == sorted(seen) and len(set(seen)) == 3
    hacpo = gpu_plan(tmp_path, "hacpo-qwen3-1.7b-4b").policy("qwen3-1.7b-base").micro_batch
    assert hacpo.peer_rows == hacpo.own_rows  # M = 2
    for pool in ("commonsense-3qwen", "commonsense-4qwen"):  # SGT: one rescue per gated prompt, whatever M
        sgt = gpu_plan(tmp_path, pool).policy("qwen2.5-math-1.5b").micro_batch
        assert (sgt.own_rows, sgt.peer_rows, sgt.rescue_rows) == (10, 0, 2)  # 10 rows x min(c=1, K=5) / 5


def test_a_micro_batch_too_big_for_the_card_is_split_keeping_the_batch(tmp_path):
    """On 40 GiB cards the 4B policy's 32-row micro-batch (72.1 GiB) cannot sit beside its 16.8 GiB of state: the
    per-device batch is divided and the accumulation multiplied, so a step still samples and updates the same."""
    before = gpu_plan(tmp_path, "hacpo-qwen3-1.7b-4b").policy("qwen3-4b-base")
    after = gpu_plan(tmp_path, "hacpo-qwen3-1.7b-4b", gpu_memory_gib=40.0).policy("qwen3-4b-base")
    grpo = after.grpo
    assert grpo["per_device_train_batch_size"] < 16
    factor = 16 // grpo["per_device_train_batch_size"]
    assert grpo["gradient_accumulation_steps"] == 4 * factor and grpo["steps_per_generation"] == 16 * factor
    assert trl_generation_batch(grpo, 4) == trl_generation_batch(before.grpo, 4)
    assert after.batch.per_device_train_batch_size == grpo["per_device_train_batch_size"]
    assert after.micro_batch.rows == 2 * grpo["per_device_train_batch_size"]
    assert after.micro_batch.activation_gib <= 40 * 0.9 - after.memory.gib_per_device
    note = next(n for n in after.notes if "micro-batch" in n)
    assert "per_device_train_batch_size 16 -> " in note and "72.1 GiB" in note and "40 GiB GPU" in note
    assert after.launch.env == {**after.launch.env, **planned_grpo_env(planned_grpo_text(grpo))}  # the worker checks this digest
    saved = LaunchPlan.from_json(gpu_plan(tmp_path, "hacpo-qwen3-1.7b-4b", gpu_memory_gib=40.0).to_json())
    assert saved.policy("qwen3-4b-base").micro_batch == after.micro_batch  # plan.json carries it


def test_a_card_that_cannot_hold_one_row_is_refused_naming_both_numbers(tmp_path):
    with pytest.raises(PlacementError) as err:
        gpu_plan(tmp_path, "hacpo-qwen3-1.7b-4b", gpu_memory_gib=20.0, overrides=["grpo.use_vllm=false"])
    text = str(err.value)
    assert "\n" not in text and text.startswith("qwen3-4b-base: ")
    assert "20 GiB GPU" in text and "2 (1 own + 1 peer) rows x 5120 tokens" in text and "GiB of activations" in text


@pytest.mark.parametrize("recipe", ["hacpo-qwen3-1.7b-4b", "prp-corrected-2qwen", "commonsense-4qwen"])
def test_the_dry_run_shows_micro_batch_rows_and_activations(tmp_path, recipe):
    plan = gpu_plan(tmp_path, recipe)
    console = Console(record=True, width=400)
    render_plan(plan, console)
    text = console.export_text()
    batch_table = text[text.index("GRPO batch per policy"):]
    assert "micro-batch rows" in batch_table and "activations / process" in batch_table
    for p in plan.policies:
        row = next(line for line in batch_table.splitlines() if line.startswith(f"│ {p.name} "))
        assert f"{p.micro_batch.describe()} x {p.micro_batch.tokens_per_row} tokens" in row
        assert f"{p.micro_batch.activation_gib:.1f} GiB" in row


def test_byte_kd_counts_a_second_forward_and_its_whole_logits(tmp_path):
    """byte-kd's canonical form runs a second forward over every own row and keeps its logits (``[rows, completion,
    vocabulary]`` float32, and their gradient at the backward: two copies): beside standalone's micro-batch of the
    same rows, 4 more rows of layers and 4 x completion x vocabulary x 4 B x 2. Its exact form (the default) forwards
    the sampled tokenization and up to ``max_covers`` others per row, all alive until the backward: 4 x (1 + 8) rows
    (``max_covers: 2``: 4 x 3). opd-sgt scores one rescue per prompt (4 rows of K = 5: 1), and byte-kd with SGT's
    rescue both."""
    from mutualrl.launch.plan.bounds import activation_bytes_per_token, micro_batch, training_dtype_bytes
    from mutualrl.launch.plan.model_shapes import model_shape

    plan = gpu_plan(tmp_path, "2qwen", gpu_memory_gib=141.0, regime="byte-kd").policy("qwen2.5-math-1.5b")
    shape = model_shape("Qwen/Qwen2.5-Math-1.5B")
    standalone = micro_batch(load_run_config("2qwen", regime="standalone").config, plan, shape, own_rows=4)
    tokens, completion = standalone.tokens_per_row, plan.grpo["max_completion_length"]
    kept, rest = activation_bytes_per_token(shape, training_dtype_bytes(plan), bool(plan.grpo.get(
        "gradient_checkpointing")), tokens)
    for overrides, distilled_rows, described in (
            (["regime.bytekd.distribution=canonical"], 4, "8 (4 own + 4 distilled)"),
            ([], 36, "40 (4 own + 36 distilled)"),
            (["regime.bytekd.max_covers=2"], 12, "16 (4 own + 12 distilled)")):
        distilled = micro_batch(load_run_config("2qwen", regime="byte-kd", overrides=overrides).config, plan, shape,
                                own_rows=4)
        assert (distilled.own_rows, distilled.distilled_rows, distilled.describe()) == (4, distilled_rows, described)
        extra = distilled_rows * (tokens * (shape.layers * kept + rest) + completion * shape.vocab * 4 * 2)
        assert (distilled.activation_gib - standalone.activation_gib) * 2**30 == pytest.approx(extra)
        assert "2 float32 copies of" in distilled.how
    rescued = micro_batch(load_run_config("2qwen", regime="opd-sgt").config, plan, shape, own_rows=4)
    assert (rescued.rescue_rows, rescued.distilled_rows) == (1, 0)
    both = micro_batch(load_run_config("2qwen", regime="byte-kd", overrides=["regime.bytekd.rescue_lam=0.3"]).config,
                       plan, shape, own_rows=4)  # with SGT's rescue: one rescue row of the 4 own rows (K = 5) too
    assert (both.rescue_rows, both.distilled_rows, both.describe()) == (1, 36, "41 (4 own + 1 rescue + 36 distilled)")

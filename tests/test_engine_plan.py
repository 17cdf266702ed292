"""The plan sizes what a run will hold: each colocated vLLM engine's share of the card and its KV cache in sequences,
the checkpoints --resume needs and the disk at the run's peak, and the memory the recipe's numbers derive."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
from rich.console import Console

from mutualrl.config.loader import load_run_config
from mutualrl.errors import PlacementError
from mutualrl.launch.plan import detect
from mutualrl.launch.plan.launch_plan import LaunchPlan, make_launch_plan
from mutualrl.launch.plan.render import render_plan

PAPER_RECIPES = ["2qwen", "3qwen", "4qwen", "llama-mist", "qwen-phi4", "commonsense-3qwen", "commonsense-4qwen",
                 "commonsense-llama-mist", "commonsense-qwen-phi4", "grpo-randpert-2qwen", "prp-corrected-2qwen",
                 "prp-naive-2qwen", "xgrpo-2qwen"]


def gpu_plan(recipe: str, gpu_memory: float, *sets: str, run_dir: Path = Path("/tmp/unused-run")) -> LaunchPlan:
    config = load_run_config(recipe, overrides=["launch.gpus=8", f"launch.gpu_memory_gib={gpu_memory}", *sets]).config
    return make_launch_plan(config, run_dir, simulate=True, vllm_available=True, dry_run=True)


def test_3qwen_engine_share_and_kv_capacity_by_hand():
    plan = gpu_plan("3qwen", 80.0)
    engine = plan.policy("qwen3-4b-base").engine
    # Qwen3-4B-Base on 4 of the 8 GPUs under ZeRO-3: 4e9 params x (2 bf16 weights + 2 grads + 12 Adam) / 4 GPUs
    # + the reference model's 2 B/param / 4 = 18e9 B = 16.764 GiB resident per GPU while the engine generates.
    assert plan.policy("qwen3-4b-base").memory.gib_per_device == pytest.approx(16.764, abs=1e-3)
    # share = (80 - 16.764 - 6 margin) / 80 = 0.7154, rounded down to 0.71
    assert engine.gpu_memory_utilization == 0.71 and engine.share_source == "memory model"
    assert plan.policy("qwen3-4b-base").grpo["vllm_gpu_memory_utilization"] == 0.71  # what the worker's TRL gets
    # engine 0.71 x 80 = 56.8 GiB; bf16 weights 8e9 B = 7.4506 GiB; runtime 1 GiB + sampler logits
    # 2 x 1024 seqs x 151936 vocab x 4 B = 1.1592 GiB; KV = 56.8 - 7.4506 - 1 - 1.1592 = 47.190 GiB
    assert engine.engine_gib == 56.8 and engine.weights_gib == 7.45 and engine.kv_cache_gib == pytest.approx(47.19)
    # one sequence: (1024 prompt + 3072 completion) tokens x 2 (K, V) x 36 layers x 8 KV heads x 128 x 2 B
    # = 0.5625 GiB; 47.190 / 0.5625 = 83.9 -> 83 sequences next to max_num_seqs 1024
    assert engine.sequence_tokens == 4096 and engine.kv_capacity_sequences == 83 and engine.max_num_seqs == 1024
    # an H200: (141 - 16.764 - 6) / 141 = 0.8385 -> 0.83; 117.03 - 7.4506 - 2.1592 = 107.42 GiB -> 190 sequences
    big = gpu_plan("3qwen", 141.0).policy("qwen3-4b-base").engine
    assert (big.gpu_memory_utilization, big.kv_capacity_sequences) == (0.83, 190)
    assert big.kv_cache_gib == pytest.approx(107.42)


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_every_paper_recipe_shows_engine_share_kv_capacity_and_peak_disk():
    for recipe in PAPER_RECIPES:
        shares = {}
        for memory in (80.0, 141.0):
            plan = gpu_plan(recipe, memory)
            out = io.StringIO()
            render_plan(plan, Console(file=out, width=240))
            text = out.getvalue()
            assert "vLLM engine per policy" in text and "Disk at the run's peak" in text, recipe
            for p in plan.policies:
                e = p.engine
                assert e.share_source == "memory model" and 0 < e.gpu_memory_utilization <= 0.9, (recipe, p.name)
                assert e.kv_capacity_sequences is None or f"{e.kv_capacity_sequences} sequences of 4096" in text
                assert e.kv_capacity_sequences > 0, (recipe, p.name)
                shares.setdefault(p.name, []).append(e.gpu_memory_utilization)
            assert plan.disk.peak_gib > 0 and len(plan.disk.policies) == len(plan.policies)
        assert all(at_141 > at_80 for at_80, at_141 in shares.values()), (recipe, shares)


def test_a_share_the_recipe_sets_is_kept_and_the_saved_plan_carries_the_engine_fields(tmp_path):
    plan = gpu_plan("2qwen", 80.0, "grpo.vllm_gpu_memory_utilization=0.5")
    data = plan.to_json()
    engine = data["policies"][0]["engine"]
    assert engine["gpu_memory_utilization"] == 0.5 and engine["share_source"] == "recipe"
    assert {"max_num_seqs", "max_num_batched_tokens", "kv_cache_gib", "kv_capacity_sequences"} <= set(engine)
    assert (engine["max_num_seqs"], engine["max_num_batched_tokens"]) == (1024, 8192)
    assert LaunchPlan.from_json(data).to_json() == data  # machines K > 0 read it back
    unknown = make_launch_plan(load_run_config("2qwen", overrides=["launch.gpus=8"]).config, tmp_path, simulate=True,
                               vllm_available=True, dry_run=True)
    assert unknown.policies[0].engine.gpu_memory_utilization is None  # derived at launch from the detected card
    assert "vllm_gpu_memory_utilization" not in unknown.policies[0].grpo


def test_save_total_limit_keeps_what_resume_needs_unless_the_recipe_says():
    plan = gpu_plan("3qwen", 80.0)
    assert {p.grpo["save_total_limit"] for p in plan.policies} == {2}  # lock-step: the newest may be uncommon
    # 2 rounds of staleness x 4 optimizer steps per round = 8 steps ahead; a save every 80: one more
    stale = gpu_plan("3qwen", 80.0, "see.max_staleness=2", "schedule.save_every=1")
    assert {p.grpo["save_total_limit"] for p in stale.policies} == {2 + math.ceil(2 * 4 / 4)}
    mine = gpu_plan("3qwen", 80.0, "grpo.save_total_limit=10")
    assert {p.grpo["save_total_limit"] for p in mine.policies} == {10}
    few = gpu_plan("3qwen", 80.0, "grpo.save_total_limit=1")
    assert all(any("save_total_limit=1" in n and "resume" in n for n in p.notes) for p in few.policies)


def cpu_plan(tmp_path, *sets: str, dry_run: bool = False, free_gib: float = 1000.0, monkeypatch=None):
    monkeypatch.setattr(detect, "free_disk_gib", lambda path: (free_gib, "/fake-fs"))
    config = load_run_config("tiny", overrides=list(sets)).config
    return make_launch_plan(config, tmp_path / "run", gpus=0, cpu_cores=2, ram_gib=1000.0, dry_run=dry_run,
                            param_counts={"tiny-bpe": 1e9, "tiny-sp": 1e9})


def test_the_peak_disk_is_checked_against_the_free_space(tmp_path, monkeypatch):
    plan = cpu_plan(tmp_path, "grpo.max_steps=200", monkeypatch=monkeypatch)
    # 1e9 params on the CPU: a checkpoint is 12 B/param = 11.18 GiB; 200 steps / a save every 100 = 2 written
    # (save_total_limit 2); final fp32 weights 3.73 GiB: 2 x 11.18 + 3.73 = 26.08 GiB per policy
    assert [p.peak_gib for p in plan.disk.policies] == [26.08, 26.08] and plan.disk.peak_gib == 52.16
    with pytest.raises(PlacementError, match=r"52.2 GiB .* against 40.0 GiB free on /fake-fs"):
        cpu_plan(tmp_path, "grpo.max_steps=200", free_gib=40.0, monkeypatch=monkeypatch)
    dry = cpu_plan(tmp_path, "grpo.max_steps=200", free_gib=40.0, dry_run=True, monkeypatch=monkeypatch)
    assert any("will not fit" in w for w in dry.warnings)
    forced = cpu_plan(tmp_path, "grpo.max_steps=200", "launch.force=true", free_gib=40.0, monkeypatch=monkeypatch)
    assert any("--force" in w for w in forced.warnings)
    assert not any("GiB free" in w for w in cpu_plan(tmp_path, free_gib=100.0, monkeypatch=monkeypatch).warnings)


def test_a_resume_counts_what_the_run_folder_already_holds(tmp_path, monkeypatch):
    held = tmp_path / "run" / "policies" / "tiny-bpe" / "checkpoint-100"
    held.mkdir(parents=True)
    (held / "weights.bin").write_bytes(b"\0" * 2**20)
    plan = cpu_plan(tmp_path, monkeypatch=monkeypatch)
    assert plan.disk.held_gib == pytest.approx(2**20 / 2**30, abs=0.01)


def test_num_generations_10000_on_a_cpu_is_refused_with_the_sizes(tmp_path):
    config = load_run_config("tiny", overrides=["grpo.num_generations=10000",
                                                "grpo.per_device_train_batch_size=10000"]).config
    # tiny-bpe (4 layers, hidden 64, 2 heads of 32, GeLU MLP 256, vocabulary 50257, float32, no checkpointing),
    # 10000 rows + 1 SGT rescue row x (16 + 4) tokens = 200020 tokens. A layer saves per token: 2 LayerNorm outputs
    # 2 x 4 x 64 + attention 5 x 4 x 64 + 4 x 2 + MLP 2 x 4 x 256 + its mask copy 4 x 20 = 3928 B; the backward:
    # final norm 8 x 64 + 2 gradients 2 x 4 x 64 + 2 x 4 x 256 = 3072 B. Layers 200020 x (4 x 3928 + 3072) + head
    # tile 4096 x 32768 x 4 + 40004 scored x 64 x 8 + head weight 50257 x 64 x 8 = 4,340,260,224 B = 4.04 GiB (no
    # full-vocabulary logits); tiny-sp's 3.58 GiB is the smaller
    with pytest.raises(PlacementError, match=r"tiny-bpe's training activations alone take 4.0 GiB \(10001 rows x 20 tokens: 4 layers x 3928 B "):
        make_launch_plan(config, tmp_path / "run", gpus=0, cpu_cores=2, ram_gib=4.0, dry_run=True)
    config.launch.force = True
    forced = make_launch_plan(config, tmp_path / "run", gpus=0, cpu_cores=2, ram_gib=4.0, dry_run=True)
    assert any("training activations" in w and "--force" in w for w in forced.warnings)
    usual = make_launch_plan(load_run_config("tiny").config, tmp_path / "run", gpus=0, cpu_cores=2, ram_gib=4.0,
                             dry_run=True)
    assert not any("working memory" in w for w in usual.warnings)


def test_a_lora_policy_under_zero3_leaves_room_for_the_adapter_syncs_gathered_model():
    """LoRA on Qwen3-4B-Base under ZeRO-3 on 4 of 8 GPUs of 80 GiB: TRL 1.16 gathers the whole model to merge the
    adapters and its blocks stay in torch's cache while the KV cache wakes. State per GPU: frozen bf16 weights
    4e9 x 2 B / 4 = 1.863 GiB; gathered model 4e9 x 2 B = 7.451 GiB; share = (80 - 1.863 - 7.451 - 6 margin) / 80 =
    0.8086 -> 0.80 (0.9, the cap, without the gather: 0.9 x 79.2 GiB + 7.45 + 1.86 + the CUDA context > 79.2 GiB)."""
    plan = gpu_plan("3qwen", 80.0, "pool.policies.qwen3-4b-base.lora={}", "launch.deepspeed=zero3")
    policy = plan.policy("qwen3-4b-base")
    assert policy.memory.gib_per_device == pytest.approx(1.863, abs=1e-3)
    assert policy.engine.gpu_memory_utilization == 0.80
    full = gpu_plan("3qwen", 80.0, "launch.deepspeed=zero3").policy("qwen3-4b-base")  # no LoRA: no whole-model gather
    assert full.engine.gpu_memory_utilization == 0.71
    h100 = gpu_plan("3qwen", 79.2, "pool.policies.qwen3-4b-base.lora={}", "launch.deepspeed=zero3").policy(
        "qwen3-4b-base")
    resident = h100.engine.gpu_memory_utilization * 79.2 + h100.memory.gib_per_device + 4e9 * 2 / 2**30
    assert resident <= 79.2 - 6.0  # the margin left for the CUDA context, NCCL and fragmentation


def test_a_share_the_recipe_sets_that_leaves_no_room_for_the_adapter_syncs_gathered_model_is_refused():
    """The same LoRA Qwen3-4B under ZeRO-3 with the recipe's share 0.9: 0.9 x 80 + 1.86 + 7.45 = 81.3 GiB > 80; 0.85
    fits the card (77.3 GiB) but not its 6 GiB margin (83.3 > 80); 0.8 keeps it (79.3 GiB)."""
    with pytest.raises(PlacementError) as err:
        gpu_plan("3qwen", 80.0, "pool.policies.qwen3-4b-base.lora={}", "launch.deepspeed=zero3",
                 "pool.policies.qwen3-4b-base.grpo.vllm_gpu_memory_utilization=0.9")
    text = str(err.value)
    assert "\n" not in text and "qwen3-4b-base: its vLLM engine's share 0.9 of the 80 GiB card" in text
    assert "7.5 GiB whole model TRL's adapter sync gathers" in text and "at most 0.80" in text
    with pytest.raises(PlacementError, match="share 0.85 of the 80 GiB card"):
        gpu_plan("3qwen", 80.0, "pool.policies.qwen3-4b-base.lora={}", "launch.deepspeed=zero3",
                 "pool.policies.qwen3-4b-base.grpo.vllm_gpu_memory_utilization=0.85")
    kept = gpu_plan("3qwen", 80.0, "pool.policies.qwen3-4b-base.lora={}", "launch.deepspeed=zero3",
                    "pool.policies.qwen3-4b-base.grpo.vllm_gpu_memory_utilization=0.8")
    assert kept.policy("qwen3-4b-base").engine.gpu_memory_utilization == 0.8

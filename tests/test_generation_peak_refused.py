"""A GPU plan whose first generation cannot fit its card is refused before anything starts (``--force``: a warning);
the builtin pool on GPUs says it trains another run than the README's.

Without vLLM, TRL 1.16 generates the completions of a whole generation batch at once (``per_device_train_batch_size x
steps_per_generation`` rows) with transformers, and their KV cache is the whole of it: on the paper recipes hundreds of
GiB per GPU, an out-of-memory first step after the models loaded on every GPU.
"""

from __future__ import annotations

import pytest

from mutualrl.cli.main import run
from mutualrl.config.loader import load_run_config
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.launch_plan import make_launch_plan
from test_cli_errors import assert_one_line_error


def plan_2qwen(tmp_path, *overrides: str):
    config = load_run_config("2qwen", overrides=["grpo.use_vllm=false", *overrides]).config
    return make_launch_plan(config, tmp_path / "run", gpus=8, simulate=True, gpu_memory_gib=80.0,
                            vllm_available=True, dry_run=True)


def test_a_generation_batch_past_the_card_is_refused_naming_the_policy_the_figure_and_the_fix(tmp_path):
    """Qwen2.5-Math-1.5B: 28 layers x K and V x 2 KV heads x 128 x 2 B (bf16) = 28,672 B a token; 2qwen generates
    16 rows x 80 steps_per_generation = 1,280 sequences of 1,024 + 3,072 tokens: 1280 x 4096 x 28672 B = 140.0 GiB of
    KV cache, + 1280 x 151,936 x 4 B of next-token logits (0.72 GiB) = 140.7 GiB, beside 6.5 GiB of model state on an
    80 GiB card."""
    with pytest.raises(PlacementError) as refused:
        plan_2qwen(tmp_path)
    text = str(refused.value)
    assert "\n" not in text
    assert text.startswith("qwen2.5-math-1.5b's generation: about 140.7 GiB per GPU (KV cache of 1280 sequences x "
                           "4096 tokens x 28672 B + their next-token logits) beside 6.5 GiB of model state, more than "
                           "the 80 GiB card;"), text
    assert "grpo.use_vllm=true" in text and "grpo.steps_per_generation" in text and text.endswith("or --force")


def test_force_starts_anyway_with_a_warning(tmp_path):
    plan = plan_2qwen(tmp_path, "launch.force=true")
    said = [w for w in plan.warnings if "generation: about" in w]
    assert len(said) == 2 and all(w.endswith("(starting anyway: --force)") for w in said), plan.warnings


def test_the_dry_run_exits_non_zero_in_one_line(capsys):
    code = run(["train", "--pool", "2qwen", "--dry-run", "--gpus", "8", "--gpu-memory", "80",
                "--set", "grpo.use_vllm=false"])
    assert_one_line_error(code, capsys.readouterr().err, "qwen2.5-math-1.5b's generation", "140.7 GiB",
                          "80 GiB card", "vLLM")


def test_the_builtin_pool_on_gpus_says_it_trains_another_run_than_the_readmes(tmp_path):
    config = load_run_config("tiny").config
    gpu = make_launch_plan(config, tmp_path / "gpu", gpus=8, simulate=True, gpu_memory_gib=80.0, vllm_available=True,
                           dry_run=True)
    said = [w for w in gpu.warnings if w.startswith("the builtin pool on GPUs")]
    assert len(said) == 1 and "tiny-bpe 4 rank(s) x 32 completions" in said[0] and "bf16 on" in said[0], gpu.warnings
    assert "CUDA_VISIBLE_DEVICES= mutualrl train" in said[0]
    cpu = make_launch_plan(config, tmp_path / "cpu", gpus=0, simulate=True, cpu_cores=2, dry_run=True)
    assert not any(w.startswith("the builtin pool") for w in cpu.warnings)


def test_a_vllm_server_generates_in_its_own_process_so_no_generation_peak_is_held_against_the_card(tmp_path):
    config = load_run_config("2qwen", overrides=["grpo.vllm_mode=server"]).config
    plan = make_launch_plan(config, tmp_path / "run", gpus=8, simulate=True, gpu_memory_gib=80.0,
                            vllm_available=True, dry_run=True)
    assert not any("generation: about" in w for w in plan.warnings), plan.warnings

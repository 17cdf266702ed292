"""A policy's ``init_adapter`` (a warm start made outside the run, merged into its model) and the ``smol-lexicon``
pool that needs one per model."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutualrl.config.loader import load_run_config
from mutualrl.config.typed import ConfigError
from mutualrl.errors import UsageError

pytestmark = pytest.mark.usefixtures("offline_hub")


def test_smol_lexicon_runs_the_pre_registered_rl_settings() -> None:
    """benchmarks/results/learning-real-pool.md, "The later RL comparison's rule": LoRA r 16 on the warm-started
    weights, 4 prompts x K = 4, 8 new tokens, temperature 1, beta 0, no chat template; measured greedy, 6 tokens."""
    config = load_run_config("smol-lexicon").config
    grpo = config.grpo
    assert (grpo["num_generations"], grpo["per_device_train_batch_size"], grpo["gradient_accumulation_steps"]) == (
        4, 16, 1)
    assert (grpo["max_completion_length"], grpo["temperature"], grpo["beta"]) == (8, 1.0, 0.0)
    assert config.task.name == "invented-lexicon" and config.validation.limit is None
    assert config.validation.max_new_tokens == 6 and config.task.stop_after_no_reward_steps == 0
    learned = {}
    for policy in config.pool.policies:
        assert policy.chat_template is False and policy.lora["r"] == 16
        folder = Path(policy.init_adapter).name
        learned[policy.model] = folder.split("-")[-2]
        assert f"--model {policy.name} --family {learned[policy.model]} --seed 1" in policy.init_adapter_build
    assert learned == {"builtin:smollm2-135m": "velish", "builtin:gemma3-270m": "ombric"}


def test_a_missing_warm_start_stops_the_launch_and_eval_naming_how_to_build_it(tmp_path: Path) -> None:
    from mutualrl.evaluation.runner import recipe_targets, tokenize_prompts
    from mutualrl.launch.run import checked

    missing = tmp_path / "adapters" / "smollm2-135m-velish-seed2"
    loaded = load_run_config("smol-lexicon", overrides=[f"pool.policies.smollm2-135m.init_adapter={missing}",
                                                        "pool.policies.smollm2-135m.init_adapter_build=make it"])
    with pytest.raises(UsageError, match=f"init_adapter: {missing} holds no LoRA adapter .*; build it with: make it$"):
        checked(loaded)
    targets = recipe_targets(loaded.config)
    assert [t.init_adapter for t in targets] == [p.init_adapter for p in loaded.config.pool.policies]
    with pytest.raises(UsageError, match="build it with: make it"):  # `mutualrl eval --pool`: before any model loads
        tokenize_prompts(targets[:1], [], lambda message: None)


def test_vllm_would_start_without_the_warm_start_so_it_is_refused() -> None:
    with pytest.raises(ConfigError, match="init_adapter.*grpo.use_vllm: false"):
        load_run_config("smol-lexicon", overrides=["pool.policies.gemma3-270m.grpo.use_vllm=true"])


@pytest.mark.slow  # peft and two tiny models in process (seconds on the loaded box)
def test_training_and_eval_start_from_the_model_with_its_warm_start_merged(tmp_path: Path) -> None:
    """What a worker loads (``merge_init_adapter``) computes what the adapter on its base computes; and a LoRA
    policy's trained adapter is evaluated on that merged model, not on the bare base."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model

    from mutualrl.pools.loading import load_model, load_model_or_adapter, merge_init_adapter

    def random_adapter(model, folder: Path, seed: int) -> None:
        torch.manual_seed(seed)
        peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
        for name, weight in peft.named_parameters():
            if "lora_B" in name:  # peft starts B at 0 (the identity); a trained adapter's is not
                torch.nn.init.normal_(weight, std=0.05)
        peft.save_pretrained(str(folder))

    base = "builtin:tiny-bpe"
    ids = torch.tensor([[5, 9, 14, 3, 7]])  # (1, T)
    random_adapter(load_model(base, "float32"), tmp_path / "warm", 1)
    with torch.no_grad():
        bare = load_model(base, "float32")(ids).logits  # (1, T, V)
        on_the_fly = PeftModel.from_pretrained(load_model(base, "float32"), str(tmp_path / "warm"))(ids).logits
        merged = merge_init_adapter(load_model(base, "float32"), str(tmp_path / "warm"))
        assert not hasattr(merged, "peft_config")  # a plain model: TRL puts the run's own LoRA on it
        assert torch.allclose(merged(ids).logits, on_the_fly, atol=1e-5)
        assert not torch.allclose(bare, on_the_fly, atol=1e-3)  # the warm start changes the function
        random_adapter(merged, tmp_path / "trained", 2)  # a run's final/ adapter, trained on the merged model
        expected = PeftModel.from_pretrained(merge_init_adapter(load_model(base, "float32"), str(tmp_path / "warm")),
                                             str(tmp_path / "trained"))(ids).logits
        evaluated = load_model_or_adapter(str(tmp_path / "trained"), "float32", base=base,
                                          init_adapter=str(tmp_path / "warm"))(ids).logits
        without = load_model_or_adapter(str(tmp_path / "trained"), "float32", base=base)(ids).logits
    assert torch.allclose(evaluated, expected, atol=1e-5)
    assert not torch.allclose(without, expected, atol=1e-3)

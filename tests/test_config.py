"""Recipe loading: typed fields, overrides, and errors that name file, field and expectation."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutualrl.config import ConfigError, list_pool_recipes, load_run_config
from mutualrl.config.loader import apply_override, deep_merge, parse_override

PAPER_POOLS = ["2qwen", "3qwen", "4qwen", "llama-mist", "qwen-phi4"]


def write(tmp_path: Path, text: str, name: str = "recipe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_pools_are_listed():
    names = {p.stem for p in list_pool_recipes()}
    assert {"tiny", *PAPER_POOLS} <= names


@pytest.mark.parametrize("pool", ["tiny", *PAPER_POOLS])
def test_shipped_pools_load_with_grpo_fields_checked(pool):
    cfg = load_run_config(pool).config
    assert cfg.pool.name == pool
    assert len(cfg.pool.policies) >= 2
    assert cfg.regime.name == "sgt"


def test_paper_pool_has_paper_settings():
    cfg = load_run_config("2qwen").config
    assert cfg.grpo["learning_rate"] == pytest.approx(1e-6)
    assert cfg.grpo["num_generations"] == 5
    assert cfg.grpo["max_completion_length"] == 3072
    assert cfg.grpo["beta"] == pytest.approx(1e-3)
    # Counted in paper steps (1024 prompts = 4 optimizer steps); tests/test_launch_cadence.py converts them.
    assert cfg.schedule.unit == "paper"
    assert (cfg.schedule.save_every, cfg.schedule.validate_every, cfg.schedule.log_every) == (20, 5, 1)
    assert "save_steps" not in cfg.grpo and cfg.validation.every_steps is None
    assert cfg.task.max_prompt_tokens == 1024
    assert cfg.batch is not None and cfg.batch.prompts_per_step == 1024
    assert cfg.regime.sgt.lam == pytest.approx(0.1)
    assert cfg.regime.xgrpo.cross_model_factor == pytest.approx(0.2)


@pytest.mark.parametrize("pool", PAPER_POOLS)
def test_paper_pools_use_a_plain_kl_loss_term(pool):
    # Paper App. "Implementation details": per-token KL as a separate loss term, not ratio-weighted.
    cfg = load_run_config(pool).config
    assert cfg.grpo["beta"] == pytest.approx(1e-3)
    assert cfg.grpo["use_bias_correction_kl"] is False


def test_overrides_by_index_name_and_regime():
    loaded = load_run_config(
        "2qwen",
        overrides=["grpo.learning_rate=2e-6", "pool.policies.qwen3-1.7b-base.grpo.learning_rate=3e-6",
                   "pool.policies.0.tokenizer=qwen3", "regime.prp.denominator=learner"],
        regime="prp",
    )
    cfg = loaded.config
    assert cfg.grpo["learning_rate"] == pytest.approx(2e-6)
    assert cfg.pool.policies[1].grpo["learning_rate"] == pytest.approx(3e-6)
    assert cfg.pool.policies[0].tokenizer == "qwen3"
    assert cfg.regime.name == "prp" and cfg.regime.prp.denominator == "learner"


def test_unknown_key_names_file_field_and_suggests(tmp_path):
    path = write(tmp_path, "pool:\n  name: x\n  polices: []\n")
    with pytest.raises(ConfigError) as err:
        load_run_config(str(path))
    msg = str(err.value)
    assert str(path) in msg and "pool.polices" in msg and "did you mean 'policies'" in msg


def test_wrong_type_names_field_and_expected_type(tmp_path):
    path = write(tmp_path, "pool:\n  name: x\n  policies:\n    - {name: a, model: m, device_share: lots}\n")
    with pytest.raises(ConfigError) as err:
        load_run_config(str(path))
    msg = str(err.value)
    assert "pool.policies[0].device_share" in msg and "expected a number" in msg and "'lots'" in msg


def test_missing_model_is_reported(tmp_path):
    path = write(tmp_path, "pool:\n  name: x\n  policies:\n    - {name: a}\n")
    with pytest.raises(ConfigError) as err:
        load_run_config(str(path))
    msg = str(err.value)
    assert "pool.policies[0].model" in msg and "required field is missing" in msg and "hub id" in msg


def test_unknown_regime_lists_choices(tmp_path):
    path = write(tmp_path, "pool:\n  name: x\n  policies: [{name: a, model: m}, {name: b, model: m}]\n"
                           "regime: {name: sgtt}\n")
    with pytest.raises(ConfigError) as err:
        load_run_config(str(path))
    msg = str(err.value)
    assert "regime.name" in msg and "'sgtt'" in msg and "'sgt'" in msg and "did you mean 'sgt'" in msg


def test_unknown_grpo_field_is_rejected_with_suggestion(tmp_path):
    path = write(tmp_path, "pool:\n  name: x\n  policies: [{name: a, model: m}]\ngrpo: {learning_rat: 1.0e-5}\n")
    with pytest.raises(ConfigError) as err:
        load_run_config(str(path))
    assert "grpo.learning_rat" in str(err.value) and "learning_rate" in str(err.value)


def test_grpo_field_wrong_type(tmp_path):
    path = write(tmp_path, "pool:\n  name: x\n  policies: [{name: a, model: m}]\ngrpo: {num_generations: many}\n")
    with pytest.raises(ConfigError) as err:
        load_run_config(str(path))
    assert "grpo.num_generations" in str(err.value) and "integer" in str(err.value)


def test_reserved_grpo_field(tmp_path):
    path = write(tmp_path, "pool:\n  name: x\n  policies: [{name: a, model: m}]\ngrpo: {output_dir: /tmp}\n")
    with pytest.raises(ConfigError, match="grpo.output_dir: set by mutualrl"):
        load_run_config(str(path))


def test_sharing_regime_needs_two_policies(tmp_path):
    path = write(tmp_path, "pool:\n  name: solo\n  policies: [{name: a, model: m}]\nregime: {name: prp}\n")
    with pytest.raises(ConfigError, match="needs at least 2"):
        load_run_config(str(path))
    # standalone is fine with one policy
    assert load_run_config(str(path), regime="standalone").config.regime.name == "standalone"


def test_duplicate_policy_names(tmp_path):
    path = write(tmp_path, "pool:\n  name: x\n  policies: [{name: a, model: m}, {name: a, model: n}]\n")
    with pytest.raises(ConfigError, match="duplicate policy name 'a'"):
        load_run_config(str(path))


def test_device_map_must_name_policies(tmp_path):
    path = write(tmp_path, "pool:\n  name: x\n  policies: [{name: a, model: m}]\n"
                           "launch: {device_map: {b: [0]}}\n")
    with pytest.raises(ConfigError, match="launch.device_map.b"):
        load_run_config(str(path))


def test_invalid_yaml_and_non_mapping(tmp_path):
    bad = write(tmp_path, "pool: [unclosed\n", "bad.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_run_config(str(bad))
    lst = write(tmp_path, "- a\n- b\n", "list.yaml")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_run_config(str(lst))


def test_extends_merges_and_child_wins(tmp_path):
    write(tmp_path, "grpo: {learning_rate: 1.0e-6, num_generations: 5}\nregime: {name: sgt}\n", "base.yaml")
    child = write(tmp_path, "extends: base.yaml\npool:\n  name: x\n  policies: [{name: a, model: m}, "
                            "{name: b, model: m}]\ngrpo: {num_generations: 3}\n", "child.yaml")
    cfg = load_run_config(str(child)).config
    assert cfg.grpo == {"learning_rate": 1e-6, "num_generations": 3}
    assert cfg.regime.name == "sgt"


def test_extends_a_list_merges_in_order_and_child_wins(tmp_path):
    write(tmp_path, "grpo: {learning_rate: 1.0e-6, num_generations: 5}\nregime: {name: sgt}\n", "base.yaml")
    write(tmp_path, "grpo: {num_generations: 4, seed: 7}\ntask: {name: qa-mix}\n", "experiment.yaml")
    child = write(tmp_path, "extends: [base.yaml, experiment.yaml]\npool:\n  name: x\n  policies: "
                            "[{name: a, model: m}, {name: b, model: m}]\ngrpo: {seed: 8}\n", "child.yaml")
    cfg = load_run_config(str(child)).config
    assert cfg.grpo == {"learning_rate": 1e-6, "num_generations": 4, "seed": 8}
    assert (cfg.regime.name, cfg.task.name) == ("sgt", "qa-mix")
    bad = write(tmp_path, "extends: [base.yaml, 3]\n", "bad.yaml")
    with pytest.raises(ConfigError, match="extends: expected a path"):
        load_run_config(str(bad))


def test_unknown_pool_suggests():
    with pytest.raises(ConfigError, match="unknown pool '2qwn'.*Did you mean '2qwen'"):
        load_run_config("2qwn")


def test_override_parsing_errors():
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_override("grpo.learning_rate")
    data = {"pool": {"policies": [{"name": "a"}]}}
    with pytest.raises(ConfigError, match="no item named 'zz'"):
        apply_override(data, ["pool", "policies", "zz", "model"], "m")
    with pytest.raises(ConfigError, match="out of range"):
        apply_override(data, ["pool", "policies", "3", "model"], "m")


def test_deep_merge_does_not_mutate():
    base = {"a": {"b": 1, "c": 2}}
    merged = deep_merge(base, {"a": {"c": 3}})
    assert merged == {"a": {"b": 1, "c": 3}} and base == {"a": {"b": 1, "c": 2}}


def test_lora_section_passes_peft_fields_through_and_names_an_unknown_key():
    from mutualrl.config.loader import load_run_config
    from mutualrl.config.lora import lora_kwargs
    from mutualrl.config.typed import ConfigError

    config = load_run_config("tiny", overrides=["pool.policies.tiny-bpe.lora={r: 8, alpha: 16, use_rslora: true}"]).config
    kwargs = lora_kwargs(config.pool.policies[0].lora)
    assert kwargs["r"] == 8 and kwargs["lora_alpha"] == 16 and kwargs["use_rslora"] is True
    assert kwargs["lora_dropout"] == 0.05 and kwargs["target_modules"] == "all-linear"  # the paper's defaults
    from peft import LoraConfig

    assert LoraConfig(**kwargs).r == 8
    with pytest.raises(ConfigError, match=r"pool.policies\[1\].lora.rank: not a field of peft.LoraConfig"):
        load_run_config("tiny", overrides=["pool.policies.tiny-sp.lora={rank: 8}"])


def test_validation_is_pure_it_neither_changes_its_input_nor_reads_files(tmp_path, monkeypatch):
    """Issue 41: config/validate.py checks and converts into a new config; the paths a recipe names are the
    resolver's check (config/loader.py), with the same message."""
    import copy
    import os

    from mutualrl.config.schema import RunConfig
    from mutualrl.config.typed import build_dataclass, to_plain
    from mutualrl.config.validate import validate_run_config

    data = {"pool": {"name": "p", "policies": [
        {"name": "a", "model": "builtin:tiny-bpe", "grpo": {"learning_rate": 2e-6}, "lora": {"alpha": 1500}},
        {"name": "b", "model": "builtin:tiny-sp"}]},
        "grpo": {"max_steps": 3, "weight_decay": 1}, "see": {"replay_consumption": str(tmp_path / "none")}}
    config = build_dataclass(RunConfig, copy.deepcopy(data), "recipe.yaml")
    before = to_plain(config)
    looked_at, real_stat = [], os.stat
    with monkeypatch.context() as patched:  # every stat of a path (exists, is_dir, open...) goes through os.stat
        patched.setattr(os, "stat", lambda path, *a, **k: looked_at.append(str(path)) or real_stat(path, *a, **k))
        checked = validate_run_config(config, "recipe.yaml")
    assert not [path for path in looked_at if path.startswith(str(tmp_path))]  # the regime registry's own: fine
    assert to_plain(config) == before  # the input is as it was
    assert checked.grpo["weight_decay"] == 1.0 and type(checked.grpo["weight_decay"]) is float  # its field's type
    assert checked.pool.policies[0].grpo["learning_rate"] == 2e-6
    assert checked.pool.policies[0].lora["alpha"] == 1500.0
    with pytest.raises(ConfigError, match="see.replay_consumption: .* is not a folder"):
        load_run_config("tiny", overrides=[f"see.replay_consumption={tmp_path / 'none'}"])

"""Every numeric setting is finite: infinity (``1e999``) and NaN are refused at the recipe/CLI boundary."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mutualrl.config import ConfigError, load_run_config

# One field of each kind: a mutualrl dataclass field, a regime setting, a TRL GRPOConfig field
# (per run and per policy), a peft LoraConfig field, a validation setting.
NON_FINITE = [
    ("tiny", "sgt", "regime.sgt.lam", "regime.sgt.lam"),
    ("tiny", None, "grpo.learning_rate", "grpo.learning_rate"),
    ("tiny", None, "grpo.temperature", "grpo.temperature"),
    ("tiny", None, "grpo.max_grad_norm", "grpo.max_grad_norm"),  # no range of its own: finiteness still holds
    ("tiny", None, "pool.policies.0.grpo.learning_rate", "learning_rate"),
    ("smol-qa", None, "pool.policies.0.lora.alpha", "lora.alpha"),
    ("smol-qa", None, "pool.policies.1.lora.lora_dropout", "lora.lora_dropout"),
]


@pytest.mark.parametrize("pool,regime,key,named", NON_FINITE)
@pytest.mark.parametrize("value", ["1e999", "-1e999", "inf", "nan"])
def test_non_finite_setting_is_refused_naming_the_field(pool, regime, key, named, value):
    with pytest.raises(ConfigError) as err:
        load_run_config(pool, overrides=[f"{key}={value}"], regime=regime)
    message = str(err.value)
    assert named in message, message
    # 1e999 is YAML's infinity, refused as such; the text "inf"/"nan" (YAML spells them .inf/.nan) is not a number
    expected = ("finite", "must be") if value.endswith("1e999") else (f"expected a number, got str '{value}'",)
    assert any(part in message for part in expected), message


def test_finite_values_still_load():
    cfg = load_run_config("tiny", overrides=["regime.sgt.lam=0.5", "grpo.max_grad_norm=1e3"], regime="sgt").config
    assert cfg.regime.sgt.lam == 0.5 and cfg.grpo["max_grad_norm"] == 1e3


def test_lora_ranges_and_exponent_text():
    with pytest.raises(ConfigError, match=r"lora\.r: must be >= 1"):
        load_run_config("smol-qa", overrides=["pool.policies.0.lora.r=0"])
    with pytest.raises(ConfigError, match=r"lora\.dropout: must be <= 1"):
        load_run_config("smol-qa", overrides=["pool.policies.0.lora.dropout=1.5"])
    cfg = load_run_config("smol-qa", overrides=["pool.policies.0.lora.alpha=6.4e1"]).config
    assert cfg.pool.policies[0].lora["alpha"] == 64.0


def test_cli_refuses_infinity_in_one_line_without_traceback(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mutualrl", "train", "--regime", "sgt", "--set",
                           "regime.sgt.lam=1e999", "-o", str(tmp_path / "run"), "--dry-run"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    assert "regime.sgt.lam" in done.stderr and "finite" in done.stderr, done.stderr
    assert not (tmp_path / "run").exists()

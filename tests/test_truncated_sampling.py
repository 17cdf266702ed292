"""Truncated sampling (``top_p < 1``, ``top_k > 0``, ``min_p > 0``) is refused, in one line naming the setting,
wherever an importance ratio would divide a full-vocabulary probability by a truncated one or the reverse: TRL 1.16's
vLLM correction and off-policy mask (vLLM's renormalised ``processed_logprobs`` against the trainer's), and a pooling
regime's peer denominator (the peer's trace under transformers generation is the untruncated log-prob)."""

from __future__ import annotations

import math

import pytest
import torch

from mutualrl.config import load_run_config
from mutualrl.config.typed import ConfigError
from mutualrl.regimes.core.sampling import check_vllm_ratio, truncating_sampling

TRUNCATING = ["grpo.top_p=0.9", "grpo.top_k=50", "grpo.min_p=0.05"]


def refused(regime: str, *overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_run_config("tiny", regime=regime, overrides=list(overrides))
    text = str(err.value)
    assert "\n" not in text
    return text


def test_the_ratio_is_off_by_the_kept_mass_by_hand():
    """p = [.5, .3, .15, .05], top_p 0.7: transformers' warper keeps {.5, .3} (S = 0.8) and samples p/S = [.625, .375];
    the trainer's full-vocabulary probability over the sampler's is 0.8 = S on either kept token (log −0.223), with
    no change of policy."""
    from transformers import TopPLogitsWarper

    p = torch.tensor([[0.5, 0.3, 0.15, 0.05]])  # [1, 4]
    sampled = torch.softmax(TopPLogitsWarper(top_p=0.7)(None, p.log()), dim=-1)  # [1, 4]
    assert sampled[0].tolist() == pytest.approx([0.625, 0.375, 0.0, 0.0], abs=1e-6)
    assert (p[0, :2] / sampled[0, :2]).tolist() == pytest.approx([0.8, 0.8], abs=1e-6)
    assert math.log(0.8) == pytest.approx(-0.2231, abs=1e-4)


def test_which_settings_truncate():
    """TRL's defaults (top_p 1, top_k 0, min_p None) and vLLM's "off" (-1) do not; ``generation_kwargs`` (a mapping
    or its JSON text) overrides the fields as TRL passes it on."""
    assert truncating_sampling({}) == []
    assert truncating_sampling({"top_p": 1.0, "top_k": 0, "min_p": None}) == []
    assert truncating_sampling({"top_k": -1, "min_p": 0.0}) == []
    assert truncating_sampling({"top_p": 0.9, "top_k": 50, "min_p": 0.05}) == [
        ("top_p", 0.9), ("top_k", 50), ("min_p", 0.05)]
    assert truncating_sampling({"top_p": 0.9, "generation_kwargs": {"top_p": 1.0}}) == []
    assert truncating_sampling({"generation_kwargs": '{"top_k": 20, "typical_p": 0.9}'}) == [
        ("generation_kwargs.top_k", 20), ("generation_kwargs.typical_p", 0.9)]


@pytest.mark.parametrize("setting", TRUNCATING)
def test_vllm_with_trls_correction_and_truncated_sampling_is_refused(setting):
    name = setting.split("=")[0]
    text = refused("standalone", "grpo.use_vllm=true", setting)
    assert f"{name}: {name.split('.')[1]}=" in text and "vllm_importance_sampling_correction" in text
    assert "trl#6789" in text and "TRL 1.17" in text


def test_vllm_truncation_is_accepted_without_a_figure_that_reads_vllms_log_probs():
    """Without TRL's correction (and no off-policy mask) or without vLLM, nothing divides by vLLM's log-probs."""
    load_run_config("tiny", regime="standalone", overrides=["grpo.use_vllm=true", "grpo.top_p=0.9",
                                                            "grpo.vllm_importance_sampling_correction=false"])
    load_run_config("tiny", regime="standalone", overrides=["grpo.top_k=50"])
    load_run_config("tiny", regime="standalone", overrides=["grpo.use_vllm=true", "grpo.top_k=0", "grpo.top_p=1.0"])
    text = refused("standalone", "grpo.use_vllm=true", "grpo.top_p=0.9",
                   "grpo.vllm_importance_sampling_correction=false", "grpo.off_policy_mask_threshold=0.5")
    assert "off_policy_mask_threshold" in text
    assert check_vllm_ratio({"use_vllm": False, "top_p": 0.5}) is None


@pytest.mark.parametrize("setting", TRUNCATING)
@pytest.mark.parametrize("regime", ["prp", "hacpo"])
def test_the_peer_denominator_with_truncated_sampling_is_refused(regime, setting):
    name = setting.split("=")[0]
    text = refused(regime, setting)
    assert f"{name}: " in text and f"regime.{regime}.denominator 'peer'" in text and "untruncated" in text


def test_a_policys_own_truncation_is_named_under_its_entry_and_what_reads_no_trace_is_accepted():
    text = refused("prp", "pool.policies.1.grpo.top_k=20")
    assert "pool.policies.tiny-sp.grpo.top_k: top_k=20" in text
    load_run_config("tiny", regime="prp", overrides=["grpo.top_p=0.9", "regime.prp.denominator=learner"])
    for regime in ("sgt", "xgrpo", "standalone"):
        load_run_config("tiny", regime=regime, overrides=["grpo.top_p=0.9"])

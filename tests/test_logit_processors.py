"""Logit processors that reshape the sampling distribution (repetition, presence and frequency penalties, biases, a
minimum length, ...) are refused, in one line naming the setting, wherever a ratio reads the trainer's log-probs as
the sampler's: TRL 1.16's vLLM correction and off-policy mask, and a pooling regime's peer denominator (PRP's
``denominator: peer``, HACPO). OPD under GSPO's sequence ratio, TRL's entropy mask or its off-policy mask is refused
the same way."""

from __future__ import annotations

import pytest
import torch

from mutualrl.config import load_run_config
from mutualrl.config.typed import ConfigError
from mutualrl.regimes.core.sampling import distorting_processors


def refused(regime: str, *overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_run_config("tiny", regime=regime, overrides=list(overrides), check_grpo=False)
    text = str(err.value)
    assert "\n" not in text
    return text


def test_a_repetition_penalty_changes_the_sampled_distribution_by_hand():
    """transformers' repetition penalty 1.3 on a token already in the text with logit 1.2: 1.2 / 1.3 = 0.9231. The
    model's probability of it e^1.2 / (e^1.2 + e^0.4 + e^-0.3) = 3.3201 / 5.5527 = 0.5979, the sampler's 2.5171 / 4.7497 =
    0.5300: a ratio with one side of each is off by 1.128 on that token, with no change of policy."""
    from transformers import RepetitionPenaltyLogitsProcessor

    logits = torch.tensor([[1.2, 0.4, -0.3]])  # [1, 3]
    processed = RepetitionPenaltyLogitsProcessor(1.3)(torch.tensor([[0]]), logits.clone())  # token 0 seen
    p, q = torch.softmax(logits, -1)[0], torch.softmax(processed, -1)[0]  # [3], [3]
    assert processed[0, 0].item() == pytest.approx(1.2 / 1.3)
    assert (p[0] / q[0]).item() == pytest.approx(1.1283, abs=1e-3)  # the trainer's over the sampler's


def test_which_settings_reshape_sampling():
    assert distorting_processors({}) == []
    assert distorting_processors({"repetition_penalty": 1.0, "generation_kwargs": {"presence_penalty": 0.0}}) == []
    assert distorting_processors({"repetition_penalty": 1.1}) == [("repetition_penalty", 1.1)]
    assert distorting_processors({"repetition_penalty": 1.1, "generation_kwargs": {"repetition_penalty": 1.0}}) == []
    assert distorting_processors({"generation_kwargs": '{"frequency_penalty": 0.2, "min_tokens": 4, '
                                                       '"logit_bias": {"5": 1.0}, "bad_words": []}'}) == [
        ("generation_kwargs.frequency_penalty", 0.2), ("generation_kwargs.min_tokens", 4),
        ("generation_kwargs.logit_bias", {"5": 1.0})]


@pytest.mark.parametrize("setting", ["grpo.repetition_penalty=1.1",
                                     'grpo.generation_kwargs={"presence_penalty": 0.5}'])
def test_vllm_with_trls_correction_and_a_processor_is_refused(setting):
    text = refused("standalone", "grpo.use_vllm=true", setting)
    assert "vllm_importance_sampling_correction" in text and "reshapes vLLM's sampling" in text


def test_vllm_processor_accepted_where_nothing_reads_its_log_probs():
    config = load_run_config("tiny", regime="standalone", check_grpo=False, overrides=[
        "grpo.use_vllm=true", "grpo.repetition_penalty=1.1",
        "grpo.vllm_importance_sampling_correction=false"]).config
    assert config.grpo["repetition_penalty"] == 1.1


@pytest.mark.parametrize("regime", ["prp", "hacpo"])
def test_the_peer_denominator_with_a_processor_is_refused(regime):
    text = refused(regime, "regime.prp.denominator=peer", "grpo.repetition_penalty=1.2")
    assert f"regime.{regime}.denominator 'peer'" in text and "repetition_penalty=1.2" in text


def test_what_reads_no_trace_is_accepted_with_a_processor():
    config = load_run_config("tiny", regime="prp", check_grpo=False, overrides=[
        "regime.prp.denominator=learner", "grpo.repetition_penalty=1.2"]).config
    assert config.regime.prp.denominator == "learner"


def test_opd_under_gspo_is_refused():
    text = refused("opd", "grpo.importance_sampling_level=sequence")
    assert text.endswith("use 'token' (TRL's default)") and "importance_sampling_level" in text
    assert load_run_config("tiny", regime="opd", check_grpo=False,
                           overrides=["grpo.importance_sampling_level=token"]).config.regime.name == "opd"


@pytest.mark.parametrize("regime", ["opd", "opd-sgt"])
@pytest.mark.parametrize("setting, key", [("grpo.top_p=0.9", "top_p=0.9"), ("grpo.top_k=50", "top_k=50"),
                                          ("grpo.min_p=0.05", "min_p=0.05"),
                                          ("grpo.repetition_penalty=1.1", "repetition_penalty=1.1")])
def test_opd_with_a_truncating_or_processed_sampler_is_refused(regime, setting, key):
    """OPD's signal is a score-function estimate under the model's own distribution: a sampler drawing from another
    one is refused in one line naming the setting, as PRP's peer denominator and HACPO are."""
    text = refused(regime, setting)
    assert key in text and f"under regime {regime}" in text
    assert load_run_config("tiny", regime=regime, check_grpo=False, overrides=[
        "grpo.top_p=1.0", "grpo.top_k=0", "grpo.repetition_penalty=1.0"]).config.regime.name == regime


@pytest.mark.parametrize("regime", ["opd", "opd-sgt"])
@pytest.mark.parametrize("setting, key", [("grpo.top_entropy_quantile=0.2", "top_entropy_quantile"),
                                          ("grpo.off_policy_mask_threshold=0.5", "off_policy_mask_threshold")])
def test_opd_under_trls_entropy_or_off_policy_mask_is_refused(regime, setting, key):
    """TRL 1.16 multiplies the per-token policy loss by these masks: the entropy mask zeroes the tokens below its
    quantile, the off-policy mask the negative-advantage tokens of a row far from the sampler, so part of OPD's signal
    (carried in the advantages) is dropped, even with TRL's own checks on. byte-kd's KL is a term of its own, outside
    both masks: accepted."""
    with pytest.raises(ConfigError) as err:
        load_run_config("tiny", regime=regime, overrides=[setting], check_grpo=True)
    text = str(err.value)
    assert "\n" not in text and f"grpo.{key}: " in text and f"under regime {regime}" in text
    assert load_run_config("tiny", regime=regime, check_grpo=False, overrides=[
        "grpo.top_entropy_quantile=1.0"]).config.regime.name == regime
    assert load_run_config("tiny", regime="byte-kd", check_grpo=False,
                           overrides=[setting]).config.regime.name == "byte-kd"

"""Which sampling settings truncate or reshape a policy's distribution, and the importance ratios that biases.

Torch-free (config validation imports it). A truncating sampler (``top_p < 1``, ``top_k > 0``, ``min_p > 0``) draws
each token from the kept tokens renormalised, ``p_t / S`` (``S``: the kept mass at that position), while the trainer
scores the full vocabulary, ``p_t``. A ratio whose two sides come from the two sides of that line is off by ``S`` per
token, ``S^|y|`` per sequence, with no change of policy at all (docs/regimes.md, "Truncated sampling").

A logit processor (a repetition, presence or frequency penalty, a bias on tokens, a minimum length that suppresses
EOS, ...) reshapes each position's distribution by the text sampled so far: the sampler draws from ``q_t ≠ p_t``
and the trainer scores ``p_t``, so a ratio with one side of each is off by ``q_t / p_t`` per token, in either
direction (docs/regimes.md, "Logit processors").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

TRUNCATING_GENERATION_KWARGS = (("typical_p", "below", 1.0), ("epsilon_cutoff", "above", 0.0),
                                ("eta_cutoff", "above", 0.0))
"""transformers' other truncating warpers, reachable through ``generation_kwargs`` (name, which side truncates, the
untruncated value)."""


DISTORTING_PROCESSORS = (
    ("repetition_penalty", 1.0), ("presence_penalty", 0.0), ("frequency_penalty", 0.0),
    ("encoder_repetition_penalty", 1.0), ("no_repeat_ngram_size", 0), ("encoder_no_repeat_ngram_size", 0),
    ("min_new_tokens", 0), ("min_length", 0), ("min_tokens", 0), ("guidance_scale", 1.0),
)
"""The logit processors of transformers' ``generate`` and vLLM's ``SamplingParams`` that a numeric setting turns on,
with the value that leaves the distribution as it is (a minimum length suppresses EOS until it is reached)."""

DISTORTING_PRESENCE = (
    "bad_words_ids", "bad_words", "suppress_tokens", "begin_suppress_tokens", "sequence_bias", "logit_bias",
    "allowed_token_ids", "forced_bos_token_id", "forced_eos_token_id", "forced_decoder_ids",
    "exponential_decay_length_penalty", "logits_processor", "logits_processors", "watermarking_config",
    "guided_decoding", "structured_outputs",
)
"""The processors and constraints that any value (not None, not empty) turns on."""


def _number(value: Any) -> float | None:
    """``value`` as a float, None where it is unset or not a number (its type is the type check's to refuse)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _generation_kwargs(grpo: Mapping[str, Any]) -> dict[str, Any]:
    """TRL's ``generation_kwargs`` (a mapping, or its JSON text), which override the sampling fields; {} if none."""
    raw = grpo.get("generation_kwargs")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return dict(raw) if isinstance(raw, Mapping) else {}


def truncating_sampling(grpo: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The settings among one policy's GRPO fields (``grpo``: shared and its own, merged) that truncate its sampling
    distribution, as ``(field, value)`` (``generation_kwargs.<name>`` where TRL's ``generation_kwargs`` overrides the
    field, as TRL passes it to either engine); [] where sampling keeps the whole vocabulary. ``top_k`` 0 or None, -1
    (vLLM's "off") and ``min_p`` None or 0 do not truncate."""
    extra = _generation_kwargs(grpo)
    out: list[tuple[str, Any]] = []
    for name, untruncated in (("top_p", lambda v: v >= 1.0), ("top_k", lambda v: v <= 0),
                              ("min_p", lambda v: v <= 0.0)):
        key, value = (f"generation_kwargs.{name}", extra[name]) if name in extra else (name, grpo.get(name))
        number = _number(value)
        if number is not None and not untruncated(number):
            out.append((key, value))
    for name, side, untruncated_value in TRUNCATING_GENERATION_KWARGS:
        number = _number(extra.get(name))
        if number is not None and (number < untruncated_value if side == "below" else number > untruncated_value):
            out.append((f"generation_kwargs.{name}", extra[name]))
    return out


def distorting_processors(grpo: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The settings among one policy's GRPO fields (``grpo``: shared and its own, merged) that turn on a logit
    processor reshaping its sampling distribution, as ``(field, value)``: TRL's own ``repetition_penalty`` (which
    ``generation_kwargs`` overrides) and any of :data:`DISTORTING_PROCESSORS` / :data:`DISTORTING_PRESENCE` in
    ``generation_kwargs`` (TRL passes them to either engine); [] where sampling draws from the model's
    distribution (temperature aside: the trainer scores at the same temperature)."""
    extra = _generation_kwargs(grpo)
    out: list[tuple[str, Any]] = []
    for name, neutral in DISTORTING_PROCESSORS:
        if name in extra:
            key, value = f"generation_kwargs.{name}", extra[name]
        elif name == "repetition_penalty":
            key, value = name, grpo.get(name)
        else:
            continue
        number = _number(value)
        if number is not None and number != neutral:
            out.append((key, value))
    for name in DISTORTING_PRESENCE:
        value = extra.get(name)
        if value is not None and value != [] and value != {} and value != "":
            out.append((f"generation_kwargs.{name}", value))
    return out


def check_processor_ratio(grpo: Mapping[str, Any], peer_denominator: bool, key: str | None) -> tuple[str, str] | None:
    """A logit processor with a ratio or denominator that reads the trainer's (the scorer's) log-probs as the
    sampler's: None, or (field, problem). Under vLLM, TRL 1.16's ``vllm_importance_sampling_correction`` (default on)
    and ``off_policy_mask_threshold`` divide the trainer's unprocessed probability by vLLM's processed one; with
    ``peer_denominator`` (PRP's ``denominator: peer``, any correction, HACPO: ``key`` names the regime's settings) the
    peer's recorded trace is the trainer's unprocessed log-prob under transformers generation, so ``w`` divides by a
    probability its sample was not drawn from."""
    processors = distorting_processors(grpo)
    if not processors:
        return None
    field = processors[0][0].split(".")[0]
    if _flag(grpo.get("use_vllm"), False):
        readers = [name for name, on in (
            ("vllm_importance_sampling_correction", _flag(grpo.get("vllm_importance_sampling_correction"), True)),
            ("off_policy_mask_threshold", grpo.get("off_policy_mask_threshold") is not None)) if on]
        if readers:
            return field, (f"{shown(processors)} reshapes vLLM's sampling distribution, and TRL 1.16's "
                           f"{' and '.join(readers)} then divides the trainer's unprocessed probability by the "
                           "sampler's: every token's ratio is off by the processor's factor; leave the processor "
                           "off, or set vllm_importance_sampling_correction: false and leave "
                           "off_policy_mask_threshold unset")
    if peer_denominator:
        return field, (f"{shown(processors)} reshapes sampling, and regime.{key}.denominator 'peer' divides by the "
                       "peer's recorded trace, which under transformers generation (wherever the plan runs a policy "
                       "without vLLM) is the model's unprocessed log-prob, not the probability its sample was drawn "
                       "from; leave the processor off")
    return None


def shown(settings: list[tuple[str, Any]]) -> str:
    """``top_p=0.9, top_k=50``: the truncating settings as a recipe writes them."""
    return ", ".join(f"{key}={value}" for key, value in settings)


def _flag(value: Any, default: bool) -> bool:
    """A boolean GRPO field as TRL reads it (``default`` where unset; a YAML/``--set`` string 'true'/'false')."""
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


def check_vllm_ratio(grpo: Mapping[str, Any]) -> tuple[str, str] | None:
    """Truncated sampling under vLLM with a TRL figure that divides by vLLM's log-probs: None, or (field, problem).

    vLLM returns ``processed_logprobs`` (over the kept tokens, renormalised: ``log p_t − log S``) and TRL 1.16 divides
    the trainer's full-vocabulary ``log p_t`` by it, so ``vllm_importance_sampling_correction`` (TRL's default: on)
    and ``off_policy_mask_threshold`` read every token's ratio as ``S`` lower than it is (trl#6789, fixed in TRL
    1.17). Without vLLM both read the trainer's own log-probs: no bias."""
    cut = truncating_sampling(grpo)
    if not cut or not _flag(grpo.get("use_vllm"), False):
        return None
    readers = [name for name, on in (
        ("vllm_importance_sampling_correction", _flag(grpo.get("vllm_importance_sampling_correction"), True)),
        ("off_policy_mask_threshold", grpo.get("off_policy_mask_threshold") is not None)) if on]
    if not readers:
        return None
    return cut[0][0].split(".")[0], (
        f"{shown(cut)} truncates vLLM's sampling, and TRL 1.16's {' and '.join(readers)} then divides the trainer's "
        "full-vocabulary probability by vLLM's renormalised one: every token's ratio is off by the kept mass "
        "(trl#6789; TRL 1.17 fixes it; the project pins TRL 1.16); sample untruncated (top_p 1, top_k 0, min_p "
        "unset), or set vllm_importance_sampling_correction: false and leave off_policy_mask_threshold unset")

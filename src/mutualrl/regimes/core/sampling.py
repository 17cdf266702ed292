"""Which sampling settings truncate a policy's distribution, and the importance ratios that truncation biases.

Torch-free (config validation imports it). A truncating sampler (``top_p < 1``, ``top_k > 0``, ``min_p > 0``) draws
each token from the kept tokens renormalised, ``p_t / S`` (``S``: the kept mass at that position), while the trainer
scores the full vocabulary, ``p_t``. A ratio whose two sides come from the two sides of that line is off by ``S`` per
token, ``S^|y|`` per sequence, with no change of policy at all (docs/regimes.md, "Truncated sampling").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

TRUNCATING_GENERATION_KWARGS = (("typical_p", "below", 1.0), ("epsilon_cutoff", "above", 0.0),
                                ("eta_cutoff", "above", 0.0))
"""transformers' other truncating warpers, reachable through ``generation_kwargs`` (name, which side truncates, the
untruncated value)."""


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

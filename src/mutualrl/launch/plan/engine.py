"""The colocated vLLM engine each policy will build: its scheduler caps, as the worker will pass them.

TRL builds the engine inside ``GRPOTrainer.__init__`` with ``max_num_seqs = per-device batch x TP x
steps_per_generation`` and a fixed ``max_num_batched_tokens=4096``; vLLM refuses a token budget below
``max_num_seqs`` (``SchedulerConfig.verify_max_model_len``), which the paper recipes reach with one GPU per
policy (5120). The worker caps them (:func:`mutualrl.training.vllm_engine.engine_caps`); the plan shows the
same numbers, computed by the same function from the planned GRPO fields, so a dry run shows what the
engine will get.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mutualrl.config.schema import LaunchConfig
from mutualrl.training.vllm_engine import TRL_MAX_NUM_BATCHED_TOKENS, engine_caps, trl_max_num_seqs


@dataclass(frozen=True)
class EngineCaps:
    """One policy's colocated engine caps: TRL's wish and what the engine gets."""

    trl_max_num_seqs: int
    max_num_seqs: int
    max_num_batched_tokens: int


def planned_engine(grpo: dict[str, Any], launch: LaunchConfig) -> EngineCaps | None:
    """The caps of the colocated engine the planned ``grpo`` fields build (None: no colocated vLLM)."""
    if not grpo.get("use_vllm") or grpo.get("vllm_mode", "colocate") != "colocate":
        return None
    steps = grpo.get("steps_per_generation") or grpo.get("gradient_accumulation_steps", 1)  # TRL's default
    wish = trl_max_num_seqs(int(grpo.get("per_device_train_batch_size", 8)),
                            int(grpo.get("vllm_tensor_parallel_size", 1) or 1), int(steps))
    seqs, tokens = engine_caps(wish, launch.vllm_max_num_seqs, launch.vllm_max_num_batched_tokens)
    return EngineCaps(wish, seqs, tokens)


def engine_note(name: str, caps: EngineCaps | None) -> list[str]:
    """The dry run's line about a policy's engine caps, when they differ from what TRL would pass."""
    if caps is None or (caps.max_num_seqs == caps.trl_max_num_seqs and caps.max_num_batched_tokens == TRL_MAX_NUM_BATCHED_TOKENS):
        return []
    capped = (f" (TRL's {caps.trl_max_num_seqs} capped: vLLM needs max_num_seqs <= max_num_batched_tokens; the "
              f"rest queue)" if caps.max_num_seqs < caps.trl_max_num_seqs else "")
    return [f"{name}: vLLM engine max_num_seqs {caps.max_num_seqs}{capped}, max_num_batched_tokens "
            f"{caps.max_num_batched_tokens} (launch.vllm_max_num_seqs / launch.vllm_max_num_batched_tokens)"]

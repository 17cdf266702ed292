"""What a regime author imports: the one mutualrl module a regime folder ``regimes/<name>/`` uses besides its own files.

- Declaring the regime (``spec.py``): :class:`RegimeSpec`, :class:`RegimeFlag`, :func:`register_regime`, ``ENV_VAR``
  (the variable naming plugin regimes); a variant's parent: :func:`parent_regime` (its spec, to ``replace``) and
  :func:`parent_adapter` (its adapter class, to subclass, from ``adapter.py`` only); the words a plot puts on a
  metric (:class:`MetricWords` and its ranges ``FREE``, ``UNIT``, ``NONNEGATIVE``, ``NONPOSITIVE``); the pooled-rows
  settings PRP and HACPO share (:class:`PooledRowsSettings`, :func:`ratio_metrics`); the rescue's settings and
  metrics (:class:`RescueGateSettings`, SGT's base; :class:`RescueSettings`, with the weight ``rescue_lam``;
  :func:`check_rescue_thresholds`, :func:`rescue_metrics`); the limits of an enumeration of tokenizations
  (:class:`CoverSettings`, ``cover_floor`` and ``max_covers``); :class:`UsageError`, what a regime raises on bad
  settings or input (one line, exit 2); :func:`whole_count`, :func:`check_rescue_counts` and
  :func:`check_optional_rescue_counts` (a rescue budget's counters), for a ``state_check`` of saved counters.
- TRL's loss types classified once (normaliser, clipping, unit): ``LOSS_TYPES``, :class:`LossType`,
  :func:`loss_type`, :func:`loss_types_where`.
- The metrics a regime returns, by how each is reduced over the ranks: :class:`Share`, :class:`Total`,
  :class:`Quantile`.
- What the trainer hands a regime (the seam): :class:`GRPOBatch` (TRL's batch), :class:`StepRollouts` (this
  policy's step), :class:`TrainerView`, ``TOKEN_WEIGHTS`` (the batch key of per-token loss weights).
- The maths a regime may reuse (``maths.py``): GRPO's advantages as TRL computes them (``TRL_STD_EPS``,
  :func:`group_advantages`, :func:`prp_pooled_advantages`, :func:`reward_scale`, :func:`nanstd`) and the pool's
  ``[P, M, K]`` layout and checks (``ScaleRewards``, :func:`check_float`, :func:`check_pool`, :func:`every_scored`,
  ...).
- The adapter's building blocks (``adapter.py``): :class:`RegimeAdapter` (the base), :class:`PooledRowsAdapter`
  and :class:`PooledStep` (peer rows pooled into the batch), :class:`PeerGroups` and :func:`gather_peer_groups`
  (peer tables as ``[P, M-1, K]`` tensors), :func:`learner_responses` (peer responses as learner token rows),
  :func:`peer_rows` and :func:`peer_row_views` (chosen rows of peer tables, by column),
  :class:`AppendedRows`, :func:`attach_sequences` and :func:`attached_rows` (rows and sequences added to TRL's
  batch, and the rows that carry one); peers' judgements of the learner's own rollouts (each peer's forward pass
  over them, through the SEE): :class:`JudgementChannel`, :func:`judge_rollouts`, :func:`judgement_sources` (each
  own row's judgement records), :func:`aligned_judgements` (THL onto the learner's tokens), :func:`own_logps`,
  :func:`timed`.
- Comparing two policies across tokenizers (per token where the tokens match, per word where they do not):
  :func:`comparison_groups`, :func:`singleton_groups`, :func:`unit_totals`, :func:`unit_heads`; on-policy
  distillation over them: :func:`distillation_signal`, :func:`success_rates`, :func:`teaching_peers` and
  :func:`teacher_weights` (which pick a teacher), and :class:`JudgedAdapter`, the base adapter of a regime whose peers
  judge its rollouts; next-byte distributions, what two vocabularies can compare: :func:`first_byte_symbols`,
  :func:`symbol_logps`, :func:`next_byte_logps` (from logits, memory-lean), :func:`clean_starts`, ``SYMBOLS``; SGT's
  rescue, one implementation for every regime that uses it: :class:`RescueBudget`, :func:`is_success`,
  :func:`own_failed`, :func:`every_own_failed`, :func:`within_budget`, :func:`rescue_gate`, :func:`choose_rescues`,
  :func:`rescue_rows`, :func:`rescue_weights`, :func:`rescue_nll`, :func:`rescue_logprob`; a success anchor on the
  prompts every own rollout solved:
  :func:`solved_prompts`, :func:`anchored_rollouts`, :func:`anchored_advantages`.

The names live in :mod:`mutualrl.regimes.core`; this module only gathers them. A ``spec.py`` must stay torch-free
(config loading and every CLI command import every spec), so the names whose modules import torch are imported on
first use (PEP 562's module ``__getattr__``), and importing this module for a spec imports no torch.
(Not :mod:`mutualrl.api`, the Python API for running experiments.)
"""

from __future__ import annotations

import importlib
from typing import Any

from mutualrl.errors import UsageError
from mutualrl.metric_labels import FREE, NONNEGATIVE, NONPOSITIVE, UNIT, MetricWords
from mutualrl.regimes.core.cover_spec import CoverSettings
from mutualrl.regimes.core.distillation_spec import per_token_ratio_check
from mutualrl.regimes.core.loss_types import LOSS_TYPES, LossType, loss_type, loss_types_where
from mutualrl.regimes.core.pooled_spec import PooledRowsSettings, ratio_metrics
from mutualrl.regimes.core.rescue_spec import (RescueGateSettings, RescueSettings, check_rescue_thresholds,
                                              rescue_metrics)
from mutualrl.regimes.core.rank_metrics import Quantile, Share, Total
from mutualrl.regimes.core.regime_spec import RegimeFlag, RegimeSpec, register_regime
from mutualrl.regimes.core.registry import ENV_VAR, parent_adapter, parent_regime
from mutualrl.regimes.core.state_file import check_optional_rescue_counts, check_rescue_counts, whole_count
from mutualrl.regimes.core.trainer_interface import TOKEN_WEIGHTS, GRPOBatch, StepRollouts, TrainerView

#: The names whose modules import torch -> the module that defines each, imported on first use. A plain literal:
#: benchmarks/walks.py reads it to follow these names as it follows an import.
TORCH_NAMES = {
    "TRL_STD_EPS": "mutualrl.regimes.core.grpo", "group_advantages": "mutualrl.regimes.core.grpo",
    "nanstd": "mutualrl.regimes.core.grpo", "prp_pooled_advantages": "mutualrl.regimes.core.grpo",
    "reward_scale": "mutualrl.regimes.core.grpo",
    "ScaleRewards": "mutualrl.regimes.core.reward_shapes", "check_float": "mutualrl.regimes.core.reward_shapes",
    "every_scored": "mutualrl.regimes.core.reward_shapes",
    "check_learner_and_peers": "mutualrl.regimes.core.reward_shapes",
    "check_pool": "mutualrl.regimes.core.reward_shapes", "check_same_shape": "mutualrl.regimes.core.reward_shapes",
    "check_scale_rewards": "mutualrl.regimes.core.reward_shapes", "join_pool": "mutualrl.regimes.core.reward_shapes",
    "split_pool": "mutualrl.regimes.core.reward_shapes",
    "RegimeAdapter": "mutualrl.regimes.core.adapter",
    "PooledRowsAdapter": "mutualrl.regimes.core.pooled_rows", "PooledStep": "mutualrl.regimes.core.pooled_rows",
    "PeerGroups": "mutualrl.regimes.core.peers", "gather_peer_groups": "mutualrl.regimes.core.peers",
    "learner_responses": "mutualrl.regimes.core.peer_responses", "peer_rows": "mutualrl.regimes.core.peer_responses",
    "peer_row_views": "mutualrl.regimes.core.peer_responses",
    "AppendedRows": "mutualrl.regimes.core.batch_rows", "attach_sequences": "mutualrl.regimes.core.batch_rows",
    "attached_rows": "mutualrl.regimes.core.batch_rows",
    "JudgementChannel": "mutualrl.regimes.core.judgements", "judge_rollouts": "mutualrl.regimes.core.judgements",
    "aligned_judgements": "mutualrl.regimes.core.judgements", "own_logps": "mutualrl.regimes.core.judgements",
    "judgement_sources": "mutualrl.regimes.core.judgements",
    "timed": "mutualrl.regimes.core.judgements",
    "comparison_groups": "mutualrl.regimes.core.word_units", "singleton_groups": "mutualrl.regimes.core.word_units",
    "unit_heads": "mutualrl.regimes.core.word_units", "unit_totals": "mutualrl.regimes.core.word_units",
    "distillation_signal": "mutualrl.regimes.core.distillation",
    "signal_row_scale": "mutualrl.regimes.core.distillation",
    "success_rates": "mutualrl.regimes.core.distillation", "JudgedAdapter": "mutualrl.regimes.core.judged_adapter",
    "teaching_peers": "mutualrl.regimes.core.distillation", "teacher_weights": "mutualrl.regimes.core.distillation",
    "first_byte_symbols": "mutualrl.regimes.core.next_bytes", "symbol_logps": "mutualrl.regimes.core.next_bytes",
    "clean_starts": "mutualrl.regimes.core.next_bytes", "SYMBOLS": "mutualrl.regimes.core.next_bytes",
    "next_byte_logps": "mutualrl.regimes.core.next_bytes",
    "TokenPieces": "mutualrl.regimes.core.byte_covers", "find_covers": "mutualrl.regimes.core.byte_covers",
    "cover_next_byte_logps": "mutualrl.regimes.core.byte_covers", "text_logp": "mutualrl.regimes.core.byte_covers",
    "CoverLimits": "mutualrl.regimes.core.cover_scoring", "learner_next_bytes": "mutualrl.regimes.core.cover_scoring",
    "learner_next_bytes_together": "mutualrl.regimes.core.cover_scoring",
    "offset_slots": "mutualrl.regimes.core.cover_scoring", "token_pieces": "mutualrl.regimes.core.cover_scoring",
    "logits_width": "mutualrl.regimes.core.cover_scoring", "OwnTexts": "mutualrl.regimes.core.cover_scoring", "own_texts": "mutualrl.regimes.core.cover_scoring",
    "text_logps": "mutualrl.regimes.core.cover_scoring", "judged_text_logps": "mutualrl.regimes.core.judgements",
    "text_signal": "mutualrl.regimes.core.distillation",
    "policy_byte_logps": "mutualrl.regimes.core.written_bytes",
    "missing_calls": "mutualrl.regimes.core.rank_forwards",
    "RescueBudget": "mutualrl.regimes.core.rescue", "rescue_gate": "mutualrl.regimes.core.rescue",
    "choose_rescues": "mutualrl.regimes.core.rescue", "rescue_weights": "mutualrl.regimes.core.rescue",
    "rescue_nll": "mutualrl.regimes.core.rescue", "every_own_failed": "mutualrl.regimes.core.rescue",
    "is_success": "mutualrl.regimes.core.rescue", "own_failed": "mutualrl.regimes.core.rescue",
    "within_budget": "mutualrl.regimes.core.rescue", "rescue_rows": "mutualrl.regimes.core.rescue",
    "rescue_logprob": "mutualrl.regimes.core.rescue",
    "solved_prompts": "mutualrl.regimes.core.success_anchor",
    "anchored_advantages": "mutualrl.regimes.core.success_anchor",
    "anchored_rollouts": "mutualrl.regimes.core.success_anchor",
}

__all__ = [
    "ENV_VAR", "FREE", "LOSS_TYPES", "NONNEGATIVE", "NONPOSITIVE", "TOKEN_WEIGHTS", "UNIT", "CoverSettings",
    "GRPOBatch", "LossType", "MetricWords",
    "PooledRowsSettings", "Quantile", "RegimeFlag", "RegimeSpec", "RescueGateSettings", "RescueSettings", "Share",
    "StepRollouts", "Total", "TrainerView", "UsageError", "check_optional_rescue_counts", "check_rescue_counts",
    "check_rescue_thresholds", "loss_type", "loss_types_where", "parent_adapter", "parent_regime",
    "per_token_ratio_check", "ratio_metrics", "register_regime", "rescue_metrics", "whole_count",
    *TORCH_NAMES,
]


def __getattr__(name: str) -> Any:
    if name not in TORCH_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(TORCH_NAMES[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value

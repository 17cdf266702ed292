"""The typed seam between the trainer (layer 5) and a regime's adapter (layer 1).

Paper, "Dataflow in One Training Loop": each policy runs its native rollout and scoring, then hands the
step to its regime, which publishes, reads its peers' fields and rewrites the GRPO batch. The trainer
(:class:`~mutualrl.training.trainer.MutualGRPOTrainer`) hands over three things, all declared here so that
a regime never imports ``training/`` and never reaches into TRL's private attributes:

- TRL's batch, typed as :class:`GRPOBatch` (the keys a regime reads or writes, with their shapes);
- :class:`StepRollouts`, the step object: what one generation step produced (prompt ids, lengths, rewards; this
  rank's rows and every rank's), built once per step in TRL's reward hook (``_calculate_rewards``, the one place
  TRL hands over every rank's rewards); the completions' tokens are TRL's batch's;
- :class:`TrainerView`, everything a regime may read or call on the trainer; the trainer implements it,
  and a test fake needs nothing more (``tests/test_regimes_seam.py``).

Back from the regime to the trainer go the rewritten :class:`GRPOBatch`, an optional extra loss term
(``RegimeAdapter.extra_loss``) and optional per-token loss weights (``RegimeAdapter.token_weights``, by default
the batch's :data:`TOKEN_WEIGHTS` rows).

Torch-free at import (annotations only), like a regime's ``spec.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, TypedDict, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    import torch
    from transformers import PreTrainedTokenizerBase


TOKEN_WEIGHTS: Final = "mutual_token_weights"
"""Key of the batch rows ``[B, T]`` (finite, >= 0) that multiply the per-token policy loss (importance-weight
corrections): a regime writes them in ``transform``; TRL shuffles and splits them with the batch's other rows."""


class GRPOBatch(TypedDict, total=False):
    """TRL's GRPO batch as it crosses the seam: the keys of ``GRPOTrainer._generate_and_score_completions``'s dict
    (TRL 1.16) that a regime reads or writes, and the keys every regime may add. A regime's own keys are declared in its
    folder, by a subclass its spec names (``RegimeSpec.batch``: SGT's ``sgt_*``, HACPO's ``hacpo_*``). A plain
    ``dict`` at run time; TRL
    shuffles it and splits it into micro-batches along the first dimension, so every tensor a regime adds has one
    row per completion (``B``: this rank's rows; PRP appends its peer rows, so ``B`` grows to ``B + N``).

    ``P``: prompt tokens, ``C``: completion tokens (PRP widens ``C`` to its peer rows' width ``T``).
    """

    # TRL's, always present
    prompt_ids: torch.Tensor  # int64 [B, P], left-padded
    prompt_mask: torch.Tensor  # int64 [B, P]
    completion_ids: torch.Tensor  # int64 [B, C], right-padded
    completion_mask: torch.Tensor  # int64 [B, C], 1 on each completion's tokens (EOS included)
    advantages: torch.Tensor  # float32 [B]
    num_items_in_batch: torch.Tensor  # int64 [], completion tokens of the generation batch over every rank
    # TRL's, where it computes them
    old_per_token_logps: torch.Tensor  # float [B, C] behaviour log-probs (absent when generation and update align)
    ref_per_token_logps: torch.Tensor  # float [B, C] reference model's log-probs (beta > 0)
    sampling_per_token_logps: torch.Tensor  # float [B, C] vLLM's sampling log-probs
    importance_sampling_ratio: torch.Tensor  # float [B, C], or [B, 1] in vLLM's sequence-level modes
    # TRL's multimodal and tool rollouts: no row is appended to a batch with one (batch_rows.UNSUPPORTED_KEYS);
    # HACPO writes tool_mask itself (0 on its peer rows: TRL's loss skips them)
    tool_mask: torch.Tensor  # int64 [B, C]
    pixel_values: torch.Tensor  # the processor's image tensor, not per row
    image_grid_thw: torch.Tensor  # int64 [images, 3]
    token_type_ids: torch.Tensor  # int64 [B, P + C], 0 on the completion
    mm_token_type_ids: torch.Tensor  # int64 [B, P + C], 0 on the completion
    # any regime's
    mutual_token_weights: torch.Tensor  # float32 [B, C] per-token loss weights (TOKEN_WEIGHTS: PRP, HACPO, variants)


@dataclass
class StepRollouts:
    """What the regimes and the SEE need to know about one generation step of this policy, beside TRL's batch
    (whose ``completion_ids`` hold the tokens: this object copies no token and no text). The trainer builds it once
    per step, from what TRL hands its reward hook.

    ``*_local`` fields cover this rank's rows (TRL's ``process_slice``); ``*_global`` fields
    cover the rows of every rank of this policy, in TRL's gathered order, where each prompt's
    K rollouts are contiguous.
    """

    step: int
    num_generations: int
    prompt_ids_local: list[str]
    sample_index_local: list[int]
    prompt_texts_local: list[Any]
    lengths_local: np.ndarray  # int64 [B_local] tokens generated per row (TRL's completion_mask may zero a cut row)
    rewards_local: torch.Tensor  # float [B_local]
    prompt_ids_global: list[str]
    rewards_global: torch.Tensor  # float [B_global]
    lengths_global: torch.Tensor  # float32 [B_global]
    process_index: int
    num_processes: int
    first_completion: Any = ""  # this rank's first completion as TRL decoded it (text or messages): the example the
    # trainer's no-signal note shows; "" where the rank has none

    @property
    def group_prompt_ids(self) -> list[str]:
        """Prompt id of each K-group of the gathered batch, in order."""
        k = self.num_generations
        return self.prompt_ids_global[::k]

    @property
    def local_rows(self) -> slice:
        """This rank's rows of the gathered batch (TRL's ``process_slice``)."""
        n_local = len(self.prompt_ids_local)
        return slice(self.process_index * n_local, (self.process_index + 1) * n_local)

    @property
    def local_groups(self) -> range:
        """This rank's K-groups among every rank's (whole groups: :meth:`require_whole_groups`)."""
        k, n_local = self.num_generations, len(self.prompt_ids_local)
        first_group = self.process_index * n_local // k
        return range(first_group, first_group + n_local // k)

    def require_whole_groups(self, regime: str) -> None:
        """A regime that attaches data to a prompt's rows (SGT, PRP, HACPO) needs whole K-groups on each rank."""
        from mutualrl.errors import UsageError

        n_local, k = len(self.prompt_ids_local), self.num_generations
        if n_local % k != 0:
            raise UsageError(
                f"regime {regime!r} needs every process to hold whole groups of num_generations={k} rollouts, but "
                f"this process holds {n_local} rows: make per_device_train_batch_size * steps_per_generation a "
                f"multiple of num_generations"
            )


class GRPOArgsView(Protocol):
    """The fields of TRL's ``GRPOConfig`` a regime reads."""

    seed: int
    steps_per_generation: int
    num_iterations: int
    gradient_accumulation_steps: int
    delta: float | None  # TRL's two-sided clip bound of the ratio (None: off)
    use_bias_correction_kl: bool  # TRL multiplies its KL term by the importance ratio (HACPO's KL rescaling reads it)


class TrainStateView(Protocol):
    """The fields of Transformers' ``TrainerState`` a regime reads."""

    max_steps: int
    global_step: int  # optimizer steps done (HACPO's stepwise clipping counts the updates of one generation)
    log_history: list[dict[str, Any]]


class RanksView(Protocol):
    """What a regime needs of accelerate's ``Accelerator``: this policy's ranks and two collectives."""

    is_main_process: bool
    num_processes: int
    device: torch.device

    def reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor: ...

    def gather(self, tensor: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class TrainerView(Protocol):
    """Everything a regime's adapter may read or call on the trainer it is bound to.

    Attributes are TRL's public ones (``GRPOTrainer`` sets them); the three methods are
    :class:`~mutualrl.training.trainer.MutualGRPOTrainer`'s, so a regime never touches TRL's private
    ``_metrics`` nor its log-prob internals.
    """

    args: GRPOArgsView
    state: TrainStateView
    accelerator: RanksView
    model: torch.nn.Module
    processing_class: PreTrainedTokenizerBase  # the learner's tokenizer (THL retokenizes into it)
    eos_token_ids: list[int]  # every id that ends a generation (TRL: the tokenizer's and the model's)
    max_completion_length: int | None
    current_gradient_accumulation_steps: int  # micro-batches of this optimizer step (Transformers sets it in train())
    scale_rewards: str  # GRPO's advantage scaling: "group", "batch" or "none"
    epsilon_low: float  # the PPO clip's lower epsilon
    epsilon_high: float  # the PPO clip's upper epsilon
    loss_type: str  # TRL's loss_type ("grpo", "dapo", ...)
    importance_sampling_level: str  # TRL's ratio: "token" or "sequence" (GSPO)
    beta: float  # the KL term's coefficient (0: no reference model)
    policy_logps: torch.Tensor | None  # float [B, C] this micro-batch's log-probs from TRL's loss forward, with grad
    # (set during compute_loss, for a regime's extra_loss; None elsewhere and under TRL's Liger loss)

    def record_metrics(self, values: Mapping[str, float], mode: str = "train") -> None:
        """Add ``values`` to this step's logged row (TRL averages what a step records under one key)."""
        ...

    def score_completions(self, model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                          completion_ids: torch.Tensor, completion_mask: torch.Tensor,
                          batch_size: int | None = None) -> torch.Tensor:
        """Per-token log-probs ``[B, C]`` of ``completion_ids`` after ``prompt_ids`` under ``model``."""
        ...

    def score_reference(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                        completion_mask: torch.Tensor) -> torch.Tensor:
        """Per-token log-probs ``[B, C]`` under the reference model (TRL's KL term, ``beta > 0``), no grad."""
        ...

    def completion_logits(self, model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                          completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
        """The next-token logits ``[B, C, V]`` before each completion token, divided by TRL's temperature (the
        distribution TRL's log-probs are of); with grad where the caller has it."""
        ...

    def aggregate_loss(self, per_token_loss: torch.Tensor, mask: torch.Tensor, inputs: GRPOBatch) -> torch.Tensor:
        """A regime's per-token loss ``[B, C]`` of this micro-batch summed and normalised as TRL's ``loss_type`` does its
        own (the same normaliser and gradient-accumulation scaling), so that it adds to TRL's loss term for term."""
        ...

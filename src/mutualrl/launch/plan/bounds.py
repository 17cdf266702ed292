"""The sizes a run derives from its recipe, estimated before it starts against the memory there is.

A recipe's numbers multiply: ``grpo.num_generations=10000`` makes a per-device batch of 10,000 completions, and one
forward over it holds every layer's activations of each of those rows. Each policy process goes through three
phases, one at a time, each with its own peak:

- training: the activations of one micro-batch (:class:`MicroBatch`). Its rows are TRL's
  ``per_device_train_batch_size`` own completions plus what the regime adds to them: PRP and HACPO append every
  peer's rollouts of the learner's prompts to the generation batch before TRL splits it into
  ``steps_per_generation`` micro-batches, so each holds ``M`` times the learner's rows (``M`` policies, every peer
  rollout scored: the upper bound); SGT scores a rescue beside each gated row (at most ``min(c, K) / K`` of the
  rows, ``c`` = ``max_pairs_per_prompt``, the rescued rows dealt evenly over the micro-batches by
  ``training/micro_batches.py``; opd-sgt one per prompt); byte-kd runs a second
  forward over every own row and keeps its whole ``rows x completion x vocabulary`` logits
  (:data:`FULL_LOGIT_COPIES`), under ``distribution: exact`` one per tokenization of the row it keeps too
  (:func:`distilled_sequences`). Every row is ``task.max_prompt_tokens + grpo.max_completion_length`` tokens long.
  The logits are TRL 1.16's fused head (``trl/trainer/utils.py:add_fused_lm_head``,
  ``trl/kernels/chunked_logprob.py``): one tile of at most 4096 scored tokens x 32768 vocabulary columns at a time,
  never ``rows x tokens x vocabulary``;
- generation: the KV cache of the rank's generation batch (``per_device_train_batch_size x steps_per_generation``
  rows x prompt + completion tokens; a colocated engine's at most ``max_num_seqs`` at once) and the next-token
  logits of those rows; on a GPU a colocated engine's memory is its share of the card (the engine table);
- validation: the KV cache and logits of ``validation.batch_size`` prompts of prompt + new tokens (through a
  colocated engine: the engine's).

On a CPU every process's peak adds up in RAM with the model states and the processes' baseline: more than the RAM
is refused (``--force``: a warning). On a GPU of known size a micro-batch whose activations do not fit beside the
model state (and a margin of a tenth of the card) is made smaller: ``per_device_train_batch_size`` divided, ``gradient_accumulation_steps``
and ``steps_per_generation`` multiplied by as much, so every update sees the same rows; where one row does not fit,
the plan refuses, naming both numbers. A generation or validation peak above the card is refused the same way
(``--force``: a warning): without vLLM, TRL generates a whole generation batch at once, and on a paper recipe that
is hundreds of GiB of KV cache, an out-of-memory first step. The node's host RAM (the
processes' baseline, loading the weights, a checkpoint save: :mod:`.host_memory`) above its RAM is refused like a
CPU pool's (``--force``: a warning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from mutualrl.config.grpo_schema import grpo_default
from mutualrl.config.schema import RunConfig
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.checks import PROCESS_BASELINE_GIB
from mutualrl.launch.plan.host_memory import check_host_memory, host_memory
from mutualrl.launch.plan.model_shapes import ModelShape, model_shape
from mutualrl.launch.plan.mwra import Placement

ATTENTION_WIDTH_TENSORS = 5
"""Tensors of the attention's width (heads x head size) one layer saves for its backward: the rotated queries, the keys
and values expanded to every head (transformers' SDPA path repeats K/V whenever a padding mask is passed, and TRL
pads every batch), SDPA's output and the ``o_proj`` input made contiguous; plus one float32 log-sum-exp per head."""
GATED_MLP_TENSORS = 4
"""Intermediate-width tensors a SwiGLU MLP saves: gate, SiLU(gate), up and their product (GPT-2's GeLU MLP: 2)."""
BACKWARD_INTERMEDIATE_TENSORS = 2
"""Intermediate-width gradients alive at the backward's peak, beyond the saved tensors (the product's and SiLU's;
measured at 2048+ tokens a micro-batch, ``benchmarks/results/activation-memory-seq512.json``)."""
HIDDEN_GRADIENTS = 2
"""Hidden-state-sized gradients in flight through the layers during the backward."""
BOOL_MASK_BYTES = 1
"""Bytes per key of the ``[rows, 1, tokens, tokens]`` boolean padding mask transformers builds for SDPA. Each
layer's SDPA converts it to the activations' dtype and saves that copy for its backward (``dtype`` bytes per key):
the one term that grows with the row's length, ``tokens`` bytes per token."""
HEAD_TILE_TOKENS = 4096
"""TRL 1.16's fused head projects at most this many scored tokens at once (``chunked_logprob.TOKEN_CHUNK_SIZE``)."""
HEAD_TILE_VOCAB = 32768
"""... onto this many vocabulary columns at once (``trl/trainer/utils.py:_CHUNKED_LOGPROB_CHUNK_SIZE``)."""
FULL_LOGIT_COPIES = 2
"""Float32 ``[rows, completion, vocabulary]`` tensors byte-kd's second forward holds at its backward: the logits
over TRL's temperature (the one such tensor ``next_byte_logps`` keeps) and their gradient
(``regimes/core/next_bytes.py``). Its forward holds less: the model's bf16 logits and one float32 copy, divided in
place (``tempered_logits``: 6 bytes a logit; ``.float() / temperature`` held 10)."""
TRAINING_MARGIN_SHARE = 0.1
"""Share of a card left to what the estimate does not count while a policy trains: the CUDA context, NCCL's
buffers, ZeRO-3's gathered parameters, the allocator's fragmentation, what a sleeping engine keeps."""


@dataclass(frozen=True)
class PhasePeak:
    """The estimated peak of one phase of a policy process, with how it was counted."""

    phase: str
    gib: float
    how: str


@dataclass(frozen=True)
class MicroBatch:
    """One forward/backward of a policy process: its rows and the activations they hold."""

    own_rows: int
    """The learner's own completions (``per_device_train_batch_size``)."""
    peer_rows: int
    """Peers' rollouts pooled into it (PRP, HACPO), at most."""
    rescue_rows: int
    """Peer successes scored beside it (SGT, opd-sgt, byte-kd with a rescue), at most: the trainer deals the rescued
    rows of a generation evenly over its micro-batches (``training/micro_batches.py``)."""
    tokens_per_row: int
    activation_gib: float | None
    """None: the model's shape is unknown here."""
    how: str
    distilled_rows: int = 0
    """Own rows scored a second time with their whole next-token logits kept (byte-kd), at most."""

    @property
    def rows(self) -> int:
        return self.own_rows + self.peer_rows + self.rescue_rows + self.distilled_rows

    def describe(self) -> str:
        """``32 (16 own + 16 peer)``."""
        added = [f"{n} {what}" for n, what in ((self.peer_rows, "peer"), (self.rescue_rows, "rescue"),
                                                (self.distilled_rows, "distilled")) if n]
        return f"{self.rows} ({' + '.join([f'{self.own_rows} own', *added])})" if added else str(self.rows)


def _field(grpo: dict[str, Any], name: str) -> int:
    value = grpo.get(name)
    return int(value if value is not None else grpo_default(name))


def added_rows(config: RunConfig, own_rows: int, k: int) -> tuple[int, int, int]:
    """(peer rows, rescue rows, distilled rows) the run's regime adds to a micro-batch of ``own_rows`` of the
    learner's rows, each at most (:attr:`MicroBatch.rescue_rows`).
    The pooled rows' settings (PRP's, HACPO's) mark a regime that pools peer rows; the rescue's (opd-sgt's, byte-kd's)
    one rescued row per prompt where ``rescue_lam`` > 0; byte-kd scores every own row again with its whole logits."""
    from mutualrl.regimes.bytekd.spec import ByteKDSettings
    from mutualrl.regimes.core.pooled_spec import PooledRowsSettings
    from mutualrl.regimes.core.registry import get_regime
    from mutualrl.regimes.core.rescue_spec import RescueSettings
    from mutualrl.regimes.sgt.spec import SGTSettings

    spec = get_regime(config.regime.name)
    settings = config.regime.settings.get(spec.settings_key) if spec.settings_key else None
    if isinstance(settings, PooledRowsSettings):
        return own_rows * (len(config.pool.policies) - 1), 0, 0
    if isinstance(settings, SGTSettings):
        return 0, math.ceil(own_rows * min(settings.max_pairs_per_prompt, k) / k), 0
    rescue = math.ceil(own_rows / k) if isinstance(settings, RescueSettings) and settings.rescue_lam > 0 else 0
    return 0, rescue, own_rows * distilled_sequences(settings) if isinstance(settings, ByteKDSettings) else 0


EXACT_COVERS_UNBOUNDED = 8
"""Tokenizations per row counted for byte-kd's exact form at ``max_covers: 0`` (none dropped: unbounded): its
default bound."""


def distilled_sequences(settings: Any) -> int:
    """Sequences byte-kd's learner forwards with a gradient per own row, alive together until the backward: the
    ``canonical`` form's second forward, one; the ``exact`` form's (``regimes/bytekd/exact.py``) the sampled
    tokenization's and one per other tokenization the enumeration keeps, ``1 + max_covers`` counted (the kept
    tokenizations of one offset; a text that branches at several offsets can hold more, logged as ``cover_states``;
    ``max_covers: 0``, unbounded, counts :data:`EXACT_COVERS_UNBOUNDED`). Each is a whole row with its logits."""
    if settings.distribution != "exact":
        return 1
    return 1 + (settings.max_covers or EXACT_COVERS_UNBOUNDED)


def training_dtype_bytes(plan: Any) -> int:
    """Bytes of an activation: 16-bit under bf16 / fp16 on a GPU, float32 otherwise."""
    grpo = plan.grpo
    return 4 if plan.placement.device_type == "cpu" or not (grpo.get("bf16") or grpo.get("fp16")) else 2


def layer_saved_bytes(shape: ModelShape, dtype: int, tokens: int) -> int:
    """Bytes per token one decoder layer saves for its backward (no checkpointing) in rows of ``tokens``, counted
    from the shape: the two RMSNorms' float32 copy and output, the q/k norms' (Qwen3),
    :data:`ATTENTION_WIDTH_TENSORS`, the MLP's and the layer's copy of the padding mask (:data:`BOOL_MASK_BYTES`).
    Checked against the CPU measurement in ``benchmarks/results/activation-memory*.json``."""
    attention_width = shape.heads * shape.head_dim
    norms = 2 * (4 + dtype) * shape.hidden if shape.gated_mlp else 2 * dtype * shape.hidden  # GPT-2: LayerNorm
    qk_norms = (4 + dtype) * (shape.heads + shape.kv_heads) * shape.head_dim if shape.qk_norm else 0
    attention = ATTENTION_WIDTH_TENSORS * dtype * attention_width + 4 * shape.heads
    mlp = (GATED_MLP_TENSORS if shape.gated_mlp else 2) * dtype * shape.intermediate
    return norms + qk_norms + attention + mlp + dtype * tokens


def activation_bytes_per_token(shape: ModelShape, dtype: int, checkpointing: bool, tokens: int) -> tuple[int, int]:
    """(bytes per token every layer keeps, bytes per token of the rest of the backward's peak) of the decoder stack,
    in rows of ``tokens``.

    Checkpointing (non-reentrant) keeps each layer's input and the boolean padding mask (an input of every layer) and
    recomputes one layer at a time: the rest is that layer's saved tensors. Either way the rest adds the final norm's,
    :data:`HIDDEN_GRADIENTS` hidden-state gradients and :data:`BACKWARD_INTERMEDIATE_TENSORS` intermediate-width
    gradients."""
    saved = layer_saved_bytes(shape, dtype, tokens)
    backward = ((4 + dtype) * shape.hidden + HIDDEN_GRADIENTS * dtype * shape.hidden
                + BACKWARD_INTERMEDIATE_TENSORS * dtype * shape.intermediate)
    if checkpointing:
        return dtype * shape.hidden, saved + backward + BOOL_MASK_BYTES * tokens
    return saved, backward


def activation_bytes(rows: int, tokens: int, scored: int, shape: ModelShape, dtype: int, checkpointing: bool,
                     head_trained: bool, full_logits: int = 0) -> tuple[float, str]:
    """Bytes a micro-batch of ``rows`` x ``tokens`` holds at its backward's peak (``scored``: the completion tokens
    the head scores; ``full_logits``: the completion tokens whose whole logits a regime keeps, byte-kd's), and how
    that was counted."""
    kept, rest = activation_bytes_per_token(shape, dtype, checkpointing, tokens)
    n = rows * tokens
    layers = n * (shape.layers * kept + rest)
    what = (f"{shape.layers} layer inputs of {kept} B + the recomputed layer and backward {rest} B per token "
            "(gradient checkpointing)" if checkpointing else
            f"{shape.layers} layers x {kept} B + backward {rest} B per token")
    tile = min(scored, HEAD_TILE_TOKENS) * min(shape.vocab, HEAD_TILE_VOCAB) * dtype
    head = tile + scored * shape.hidden * (dtype + 4) + (shape.vocab * shape.hidden * (4 + dtype) if head_trained else 0)
    how = (f"{rows} rows x {tokens} tokens: {what}, TRL's fused head (a {min(scored, HEAD_TILE_TOKENS)} x "
           f"{min(shape.vocab, HEAD_TILE_VOCAB)} tile, float32 gradients"
           f"{' and the head weight' if head_trained else ''})")
    logits = full_logits * shape.vocab * 4 * FULL_LOGIT_COPIES
    if full_logits:
        how += f", {FULL_LOGIT_COPIES} float32 copies of {full_logits} tokens x {shape.vocab} logits"
    return layers + head + logits, how


def micro_batch(config: RunConfig, plan: Any, shape: ModelShape | None, own_rows: int | None = None) -> MicroBatch:
    """The micro-batch of ``plan``'s process with ``own_rows`` of its own (default: its per-device batch)."""
    grpo = plan.grpo
    own = own_rows or _field(grpo, "per_device_train_batch_size")
    peer, rescue, distilled = added_rows(config, own, _field(grpo, "num_generations"))
    completion = _field(grpo, "max_completion_length")
    tokens = config.task.max_prompt_tokens + completion
    if shape is None:
        return MicroBatch(own, peer, rescue, tokens, None, "model shape unknown", distilled)
    lora = next(p.lora for p in config.pool.policies if p.name == plan.name) is not None
    rows = own + peer + rescue + distilled
    held, how = activation_bytes(rows, tokens, (own + peer + rescue) * completion, shape, training_dtype_bytes(plan),
                                 bool(grpo.get("gradient_checkpointing")), not lora, distilled * completion)
    return MicroBatch(own, peer, rescue, tokens, held / 2**30, how, distilled)


CARD_FIXES = {
    "training activations": "lower grpo.per_device_train_batch_size (batch.micro_batch_prompts_per_device) or the "
                            "lengths",
    "generation": "generate with vLLM (grpo.use_vllm=true; ./setup.sh installs it on an NVIDIA box), whose engine "
                  "pages its KV cache within its share of the card, or lower grpo.steps_per_generation or the lengths "
                  "(without vLLM, TRL generates the completions of steps_per_generation micro-batches at once)",
    "validation": "lower validation.batch_size or validation.max_new_tokens",
}
"""What brings each phase's peak (:func:`phase_peaks`) within a card."""


def phase_peaks(config: RunConfig, plan: Any, shape: ModelShape) -> list[PhasePeak]:
    """Training, generation and validation peaks of one process of ``plan`` (module docstring)."""
    grpo, gib = plan.grpo, 2**30
    dtype = training_dtype_bytes(plan)
    rows, completion = _field(grpo, "per_device_train_batch_size"), _field(grpo, "max_completion_length")
    prompt = config.task.max_prompt_tokens
    kv_token = shape.kv_bytes_per_token(dtype)
    batch = micro_batch(config, plan, shape)
    peaks = [PhasePeak("training activations", batch.activation_gib or 0.0, batch.how)]
    steps = grpo.get("steps_per_generation") or grpo.get("gradient_accumulation_steps") or 1
    generated = rows * int(steps)
    engine = getattr(plan, "engine", None)
    if engine is not None:
        generated = min(generated, engine.max_num_seqs)
    # a GPU engine's memory is its share (engine table); a server's (`trl vllm-serve`) is another process's
    served = bool(grpo.get("use_vllm")) and grpo.get("vllm_mode") == "server" and plan.placement.device_type != "cpu"
    if not served and (engine is None or plan.placement.device_type == "cpu"):
        kv = generated * (prompt + completion) * kv_token
        logits = generated * shape.vocab * 4
        peaks.append(PhasePeak("generation", (kv + logits) / gib, f"KV cache of {generated} sequences x "
                               f"{prompt + completion} tokens x {kv_token} B + their next-token logits"))
    if engine is not None:  # validation generates through the engine: its KV cache is the engine's
        return peaks
    val_rows = config.validation.batch_size
    val_tokens = prompt + (config.validation.max_new_tokens or completion)
    validation = val_rows * (val_tokens * kv_token + shape.vocab * 4)
    peaks.append(PhasePeak("validation", validation / gib, f"KV cache of {val_rows} prompts x {val_tokens} tokens "
                           f"x {kv_token} B + their next-token logits"))
    return peaks


def plan_micro_batches(config: RunConfig, placement: Placement, plans: list[Any],
                       gpu_memory_gib: float | None) -> None:
    """Give each plan its :class:`MicroBatch`; on GPUs of known size make a micro-batch too big for the card smaller
    or refuse it (:func:`fit_card`)."""
    for plan in plans:
        shape = model_shape(plan.model)
        plan.micro_batch = micro_batch(config, plan, shape)
        if shape is not None and placement.device_type != "cpu" and gpu_memory_gib is not None:
            fit_card(config, plan, plans, shape, gpu_memory_gib)


def card_room(plan: Any, plans: list[Any], gpu_memory_gib: float) -> float | None:
    """GiB of ``plan``'s card left to its activations while it trains: the card less the model states there, an
    awake engine's share (no sleep mode), the activations of another policy on the same GPU and
    :data:`TRAINING_MARGIN_SHARE` of it; None: a model state there is unknown."""
    devices = set(plan.placement.devices)
    there = [p for p in plans if set(p.placement.devices) & devices]
    if any(p.memory is None for p in there):
        return None
    room = gpu_memory_gib * (1 - TRAINING_MARGIN_SHARE) - sum(p.memory.gib_per_device for p in there)
    for other in there:
        engine = other.engine
        if engine is not None and not other.grpo.get("vllm_enable_sleep_mode"):
            room -= (engine.gpu_memory_utilization or 0.0) * gpu_memory_gib
        if other is not plan and other.micro_batch is not None:
            room -= other.micro_batch.activation_gib or 0.0
    return room


def fit_card(config: RunConfig, plan: Any, plans: list[Any], shape: ModelShape, gpu_memory_gib: float) -> None:
    """Lower ``plan``'s ``per_device_train_batch_size`` to the largest divisor whose micro-batch fits its card (the
    same rows per update); :class:`~mutualrl.errors.PlacementError` in one line when one row does not fit."""
    room = card_room(plan, plans, gpu_memory_gib)
    batch = plan.micro_batch
    if room is None or batch.activation_gib <= room:
        return
    own = batch.own_rows
    for fewer in sorted((d for d in range(1, own) if own % d == 0), reverse=True):
        smaller = micro_batch(config, plan, shape, own_rows=fewer)
        if smaller.activation_gib <= room:
            plan.notes.append(lower_batch(plan, own // fewer, batch, room, gpu_memory_gib))
            plan.micro_batch = smaller
            return
    least = micro_batch(config, plan, shape, own_rows=1)
    raise PlacementError(
        f"{plan.name}: its micro-batch does not fit its {gpu_memory_gib:g} GiB GPU even at "
        f"per_device_train_batch_size 1: {least.describe()} rows x {least.tokens_per_row} tokens take about "
        f"{least.activation_gib:.1f} GiB of activations, more than the {room:.1f} GiB the card leaves beside the "
        f"model state and a {TRAINING_MARGIN_SHARE:.0%} margin; give the policy more GPUs, shorter sequences (task.max_prompt_tokens, "
        f"grpo.max_completion_length)" + ("" if plan.grpo.get("gradient_checkpointing")
                                          else " or grpo.gradient_checkpointing=true"))


def lower_batch(plan: Any, factor: int, before: MicroBatch, room: float, gpu_memory_gib: float) -> str:
    """Divide ``plan``'s per-device batch by ``factor`` and multiply its accumulation (and steps per generation where
    the recipe sets them) by it; returns the note (the plan vouches for the final settings after every stage)."""
    grpo = plan.grpo
    old = {key: grpo.get(key) for key in ("per_device_train_batch_size", "gradient_accumulation_steps",
                                           "steps_per_generation")}
    grpo["per_device_train_batch_size"] = _field(grpo, "per_device_train_batch_size") // factor
    grpo["gradient_accumulation_steps"] = _field(grpo, "gradient_accumulation_steps") * factor
    if grpo.get("steps_per_generation") is not None:  # unset, it follows the accumulation (TRL's default)
        grpo["steps_per_generation"] = int(grpo["steps_per_generation"]) * factor
    if plan.batch is not None:
        plan.batch = replace(plan.batch, **{key: grpo[key] for key in old})
    changed = ", ".join(f"grpo.{key} {value} -> {grpo[key]}" for key, value in old.items()
                        if value is not None and value != grpo[key])
    return (f"{plan.name}: {changed}: a micro-batch of {before.describe()} rows x {before.tokens_per_row} tokens "
            f"takes about {before.activation_gib:.1f} GiB of activations, more than the {room:.1f} GiB its "
            f"{gpu_memory_gib:g} GiB GPU leaves beside the model state; every update sees the same rows")


def check_bounds(config: RunConfig, placement: Placement, plans: list[Any], ram_gib: float | None,
                 gpu_memory_gib: float | None) -> list[str]:
    """Every policy's peak against the memory there is (module docstring); returns warnings, raises
    :class:`~mutualrl.errors.PlacementError` when a CPU pool, or a GPU node's host RAM, cannot hold it (unless
    ``launch.force``)."""
    peaks: dict[str, PhasePeak] = {}
    for plan in plans:
        shape = model_shape(plan.model)
        if shape is not None:
            peaks[plan.name] = max(phase_peaks(config, plan, shape), key=lambda p: p.gib)
    if placement.device_type == "cpu":
        return _check_ram(config, plans, peaks, ram_gib)
    warnings = check_host_memory(host_memory(config, plans, ram_gib), config.launch.force)
    for plan in plans:
        peak = peaks.get(plan.name)
        if peak is None or gpu_memory_gib is None or plan.memory is None:
            continue
        awake = (plan.engine.gpu_memory_utilization or 0.0) if plan.engine is not None and not plan.grpo.get(
            "vllm_enable_sleep_mode") else 0.0
        need = plan.memory.gib_per_device + peak.gib + awake * gpu_memory_gib
        if need > gpu_memory_gib:
            text = (f"{plan.name}'s {peak.phase}: about {peak.gib:.1f} GiB per GPU ({peak.how}) beside "
                    f"{plan.memory.gib_per_device:.1f} GiB of model state, more than the {gpu_memory_gib:g} GiB card; "
                    f"{CARD_FIXES[peak.phase]}")
            if peak.phase == "training activations" or config.launch.force:
                warnings.append(text + (" (starting anyway: --force)" if config.launch.force else ""))
            else:  # the first generation would run out of memory, minutes and a GPU hour in
                raise PlacementError(text + ", or --force")
    return warnings


def _check_ram(config: RunConfig, plans: list[Any], peaks: dict[str, PhasePeak], ram_gib: float | None) -> list[str]:
    """A CPU pool: every process's state, baseline and peak together against the RAM."""
    if ram_gib is None or not peaks:
        return []
    processes = sum(p.placement.num_processes for p in plans)
    states = sum(p.memory.gib_per_device for p in plans if p.memory is not None)
    working = {p.name: peaks[p.name].gib * p.placement.num_processes for p in plans if p.name in peaks}
    need = states + processes * PROCESS_BASELINE_GIB + sum(working.values())
    if need <= ram_gib:
        return []
    biggest = max(working, key=lambda name: working[name])
    peak = peaks[biggest]
    text = (f"this machine cannot hold the run's working memory: about {need:.1f} GiB of RAM needed, "
            f"{ram_gib:.1f} GiB here; {biggest}'s {peak.phase} alone take {peak.gib:.1f} GiB ({peak.how})")
    if config.launch.force:
        return [text + " (starting anyway: --force)"]
    raise PlacementError(text + "; lower grpo.num_generations, grpo.per_device_train_batch_size, the lengths or "
                         "validation.batch_size, or --force")

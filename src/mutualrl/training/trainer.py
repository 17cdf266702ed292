"""``MutualGRPOTrainer``: TRL's GRPOTrainer plus the SEE round-trip of mutual RL.

Paper, "Dataflow in One Training Loop": each policy runs its native rollout and scoring,
publishes typed fields to the Shared Experience Exchange, transforms the peer fields it
subscribes to (THL), and builds its regime-specific GRPO objective locally. The hook
points in TRL 1.16 are:

1. :meth:`_calculate_rewards` -- TRL gathers every rank's rewards here; from them, the prompt ids and the
   generated lengths we build the step's one :class:`~mutualrl.regimes.core.trainer_interface.StepRollouts` (every rank's rewards
   and prompt ids, this rank's rows), once, for the step's records and the regimes.
2. :meth:`_generate_and_score_completions` -- after TRL built the batch, we publish this
   rank's rollout records, wait for the peers' records of the same step (barrier), and
   let the active regime rewrite the batch (advantages for XGRPO / randpert, extra rows for
   PRP, auxiliary SGT sequences). Every tensor keeps a consistent leading dimension, so
   TRL's shuffling and splitting into micro-batches keep working; :meth:`_prepare_inputs` then deals the rows that
   carry an auxiliary sequence evenly over the micro-batches.
3. :meth:`compute_loss` -- the regime may weight TRL's per-token policy loss (``token_weights``:
   PRP's corrections, HACPO; applied once, :func:`weighted_advantages`) and add an auxiliary term
   (SGT's gated NLL), scaled for gradient accumulation like TRL scales its own loss.

With the ``standalone`` regime nothing but optional record publishing happens, and the
parameters after N steps equal those of vanilla ``GRPOTrainer`` (App. "Infrastructure
fidelity"; checked by ``benchmarks/fidelity.py`` and the test suite).

The regime sees this trainer only through :class:`~mutualrl.regimes.core.trainer_interface.TrainerView` (what it may
read and call) and each step through :class:`~mutualrl.regimes.core.trainer_interface.StepRollouts` and TRL's batch; both live at
the regimes' layer, so the regimes never import this module.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from mutualrl.regimes.core.adapter import RegimeAdapter
from mutualrl.regimes.core.loss_types import loss_type
from mutualrl.regimes.core.next_bytes import tempered_logits
from mutualrl.regimes.core.trainer_interface import GRPOBatch, StepRollouts
from mutualrl.training.trl_metrics import TRLMetrics

log = logging.getLogger(__name__)


class MutualGRPOTrainer(TRLMetrics, GRPOTrainer):
    """GRPOTrainer for one policy of a mutual-RL pool.

    Args (besides GRPOTrainer's):
        policy_name: this policy's name in the pool.
        regime: a :class:`mutualrl.regimes.core.adapter.RegimeAdapter` (it holds the SEE exchange, if any).
        vllm_caps: ``(launch.vllm_max_num_seqs, launch.vllm_max_num_batched_tokens)`` for a colocated engine
            (:func:`mutualrl.training.vllm_engine.engine_caps`; ``None``: TRL's, capped so vLLM accepts them).
    """

    def __init__(self, *args: Any, policy_name: str, regime: RegimeAdapter,
                 vllm_caps: tuple[int | None, int | None] = (None, None), **kwargs: Any):
        from mutualrl.host.trl_cpu_lm_head_patch import score_labelled_rows_only_on_cpu
        from mutualrl.training.vllm_engine import engine_overrides, install_cpu_weight_sync, on_cpu_colocate

        # The engine's caps (any device); on a CPU also the model's dtype and eager mode.
        with engine_overrides(kwargs.get("args"), kwargs.get("model"), *vllm_caps):
            super().__init__(*args, **kwargs)
        if on_cpu_colocate(self.args):
            install_cpu_weight_sync(self.vllm_generation, policy_name)  # vLLM's CPU backend repacks its weights
        score_labelled_rows_only_on_cpu(self.model)  # on a CPU: TRL's numbers from the labelled positions only
        self.policy_name = policy_name
        self.regime = regime
        self._step_rollouts: StepRollouts | None = None  # built in _calculate_rewards, taken once per step
        self.signal_watch: Any = None  # training.reward_signal_watch.RewardSignalWatch, made at the first step
        self.generation_delay: tuple[float, str | None] = (0.0, None)  # (seconds, "even" | "odd" | None)
        self.policy_logps: torch.Tensor | None = None  # [B, C] of TRL's loss forward, inside compute_loss only
        self._capture_policy_logps = False
        self.weight_sync: Any = None  # training.weight_sync.WeightSyncWatch, made at the first vLLM step
        self._gap_in_loss = False  # this generation's weight-sync gap is read from the loss's forward
        self.regime.bind(self)

    def throttle(self) -> None:
        """Sleep ``generation_delay`` before a generation (:func:`mutualrl.fault_injection.step_delay`: wall time only)."""
        seconds, parity = self.generation_delay
        if seconds > 0 and (parity is None or (self.state.global_step % 2 == 0) == (parity == "even")):
            time.sleep(seconds)

    # -- 1. rewards: the step object ---------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self.model.training:  # TRL's evaluation loop scores too: no step of ours
            self._step_rollouts = self._collect_step_rollouts(inputs, prompts, completions, completion_ids_list,
                                                              rewards_per_func)
        return rewards_per_func

    # -- 2. batch -----------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> GRPOBatch:
        if self.model.training:
            self.throttle()
        started = time.perf_counter()
        output: GRPOBatch = super()._generate_and_score_completions(inputs)
        if not self.model.training:  # TRL's own evaluation loop: no exchange
            return output
        # Where a step's time goes: rollout (generation, rewards, old log-probs) vs TRL's step_time.
        self.record_metrics({"mutual/rollout_seconds": time.perf_counter() - started})
        rollouts = self._take_step_rollouts()
        own = (output.get("sampling_per_token_logps"), output["completion_mask"])  # [B, C] each: TRL's own rows
        started = time.perf_counter()
        output = self.regime.process_step(output, rollouts)
        self.record_metrics({"mutual/exchange_seconds": time.perf_counter() - started})
        self.measure_weight_sync(*own, output.get("old_per_token_logps"))
        # after the peers' round is read: a peer's success teaches SGT and PRP
        self.watch_signal(rollouts)
        return output

    def _prepare_inputs(self, generation_batch: Any) -> GRPOBatch:
        """TRL's, with the rows that carry a rescue dealt evenly over the generation's micro-batches
        (:func:`~mutualrl.training.micro_batches.deal_attached_rows`: what the memory plan counts)."""
        from mutualrl.training.micro_batches import deal_attached_rows

        generate_every = self.args.steps_per_generation * self.num_iterations
        fresh = self.model.training and (self._step % generate_every == 0 or self._buffered_inputs is None)
        inputs = super()._prepare_inputs(generation_batch)
        if not fresh:
            return inputs
        self._buffered_inputs = deal_attached_rows(self._buffered_inputs)
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def watch_signal(self, rollouts: StepRollouts) -> None:
        """Log the all-fail share; once, after several steps with no reward spread, what was seen (with this rank's
        first completion as TRL decoded it); stop after ``task.stop_after_no_reward_steps`` steps in which nothing
        scored (training/reward_signal_watch.py)."""
        from mutualrl.training.reward_signal_watch import ALL_FAIL_KEY, RewardSignalWatch

        if self.signal_watch is None:  # resumed: the lowest mean reward logged before stands for the rewards seen
            means = [h["reward"] for h in self.state.log_history if isinstance(h.get("reward"), (int, float))
                     and math.isfinite(h["reward"])]
            self.signal_watch = RewardSignalWatch(self.policy_name, lowest=min(means, default=None),
                                                  stop_after=self.regime.config.task.stop_after_no_reward_steps)
        rewards = rollouts.rewards_global.tolist()
        failed, note = self.signal_watch.observe(rewards, rollouts.num_generations, rollouts.first_completion,
                                                 float(rollouts.rewards_local[0]) if len(rollouts.rewards_local) else 0.0,
                                                 peers_scored=self.regime.peers_scored)
        self.record_metrics({ALL_FAIL_KEY: failed})
        if note is not None and self.accelerator.is_main_process:
            logging.getLogger("mutualrl.worker").warning(note)

    def measure_weight_sync(self, sampling: torch.Tensor | None, mask: torch.Tensor,
                            old: torch.Tensor | None) -> None:
        """Log ``mutual/weight_sync_logp_gap`` of this generation (training/weight_sync.py): vLLM's ``sampling``
        log-probs of TRL's own rows ``[B, C]`` against ``old`` (``[B+N, T]``, own rows first) where TRL or the regime
        scored them, else against the loss's forward (:meth:`compute_loss`). Nothing without vLLM."""
        from mutualrl.training.weight_sync import logp_gap

        # Without old log-probs no row was appended either: a regime appending rows under vLLM scores its snapshot.
        self._gap_in_loss = sampling is not None and old is None
        if sampling is None or old is None:
            return
        rows, width = sampling.shape
        self.record_weight_sync(logp_gap(old[:rows, :width], sampling, mask))

    def record_weight_sync(self, gap: float) -> None:
        """Record one weight-sync gap (reduced over the ranks) and warn once in the run log when it grew (rank 0's
        own figure decides: no second collective)."""
        from mutualrl.training.weight_sync import GAP_KEY, WeightSyncWatch

        self.record_metrics({GAP_KEY: gap})
        if self.weight_sync is None:
            self.weight_sync = WeightSyncWatch(self.policy_name)
        note = self.weight_sync.observe(float(gap), self.state.global_step + 1)  # the step its metrics row names
        if note is not None and self.accelerator.is_main_process:
            logging.getLogger("mutualrl.worker").warning(note)

    def _take_step_rollouts(self) -> StepRollouts:
        """The step object :meth:`_calculate_rewards` built (once: the next step builds its own)."""
        rollouts = self._step_rollouts
        if rollouts is None:  # pragma: no cover - TRL always calls _calculate_rewards first
            raise RuntimeError("rewards were not captured for this step")
        self._step_rollouts = None
        return rollouts

    def _collect_step_rollouts(self, inputs: list[dict[str, Any]], prompts: list[Any], completions: list[Any],
                               completion_ids: list[list[int]], rewards_per_func: torch.Tensor) -> StepRollouts:
        """The step's one :class:`StepRollouts`, from what TRL hands :meth:`_calculate_rewards` (this rank's dataset
        rows, prompts, decoded completions and generated token ids; every rank's rewards per function ``[B_global,
        F]``, NaN where a function returned None): every rank's rewards (weighted, NaN where no function scored) and
        prompt ids, this rank's lengths; the tokens stay in TRL's batch, the prompts and completions in TRL's lists."""
        weights = self.reward_weights.to(rewards_per_func.device)
        rewards_global = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        rewards_global[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        n_local = len(inputs)
        index = self.accelerator.process_index
        local = slice(index * n_local, (index + 1) * n_local)
        prompt_ids_local = [str(row["prompt_id"]) for row in inputs]
        lengths_local = np.fromiter(map(len, completion_ids), dtype=np.int64, count=n_local)  # [B]
        if self.accelerator.num_processes > 1:
            prompt_ids_global = gather_object(prompt_ids_local)
            lengths_global = gather_object(lengths_local.tolist())
        else:
            prompt_ids_global, lengths_global = prompt_ids_local, lengths_local
        k = self.num_generations
        first_global_row = index * n_local
        return StepRollouts(
            step=self.state.global_step,
            num_generations=k,
            prompt_ids_local=prompt_ids_local,
            sample_index_local=[(first_global_row + i) % k for i in range(n_local)],
            prompt_texts_local=prompts,
            lengths_local=lengths_local,
            rewards_local=rewards_global[local].detach().cpu(),
            prompt_ids_global=list(prompt_ids_global),
            rewards_global=rewards_global.detach().cpu(),
            lengths_global=torch.tensor(np.asarray(lengths_global), dtype=torch.float32),
            process_index=index,
            num_processes=self.accelerator.num_processes,
            first_completion=completions[0] if completions else "",
        )

    # -- 3. loss ------------------------------------------------------------------------
    def compute_loss(self, model, inputs: GRPOBatch, return_outputs=False, num_items_in_batch=None):
        weights = self.regime.token_weights(inputs)
        policy_inputs: GRPOBatch = inputs if weights is None else {
            **inputs, "advantages": weighted_advantages(inputs["advantages"], weights, self.regime.name)}
        self.policy_logps, self._capture_policy_logps = None, True
        try:
            loss = super().compute_loss(model, policy_inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        finally:
            self._capture_policy_logps = False
        sampling = inputs.get("sampling_per_token_logps")  # [b, C]
        if self._gap_in_loss and self.model.training and self.policy_logps is not None and sampling is not None:
            from mutualrl.training.weight_sync import logp_gap

            # TRL scored no old log-probs: this forward's, detached, are them (the weights vLLM was given)
            self.record_weight_sync(logp_gap(self.policy_logps, sampling, inputs["completion_mask"]))
        try:
            extra = self.regime.extra_loss(model, inputs)
        finally:
            self.policy_logps = None  # the graph is the loss's from here on
        if extra is not None:
            loss = loss + extra
        return loss

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        """TRL's own; inside :meth:`compute_loss` it also keeps the log-probs of TRL's loss forward (with their graph)
        as :attr:`policy_logps`, so that a regime's ``extra_loss`` reads the same forward instead of running another."""
        result = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._capture_policy_logps:
            self.policy_logps = result[0]  # [B, C]
        return result

    def aggregate_loss(self, per_token_loss: torch.Tensor, mask: torch.Tensor, inputs: GRPOBatch) -> torch.Tensor:
        """``per_token_loss`` ``[B, C]`` reduced as TRL 1.16's ``_compute_loss`` reduces its own for this ``loss_type``
        (its branches, normaliser for normaliser), scaled for gradient accumulation as TRL scales its loss."""
        training = self.model.training
        accumulation = self.current_gradient_accumulation_steps if training else 1.0
        masked = per_token_loss * mask  # [B, C]
        normaliser = loss_type(self.loss_type).normaliser  # regimes/core/loss_types.py, TRL's branches classified
        if normaliser == "row_tokens":
            return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accumulation
        if normaliser == "batch_tokens":
            return masked.sum() / mask.sum().clamp(min=1.0) / accumulation
        if normaliser == "max_length":
            return masked.sum() / (per_token_loss.size(0) * self.max_completion_length) / accumulation
        if normaliser == "generation_tokens":
            normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if training:
                normalizer = normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation
            return masked.sum() / normalizer
        return masked.sum(-1).mean() / accumulation  # "rows"

    # -- 4. checkpoints: complete by construction ----------------------------------------
    def _save_checkpoint(self, model, trial):
        """Transformers' save, the regime's running state (``regime_state``), then the checkpoint's manifest as its
        last file (``checkpoint_files``): a save stopped anywhere (kill, crash, full disk) leaves a folder that resume
        names and skips. A disk error becomes one line naming the folder and the free space
        (``errors.StorageError``)."""
        from pathlib import Path

        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        from mutualrl import fault_injection
        from mutualrl.assets.cache import umask_file_modes
        from mutualrl.write_failures import storage_errors
        from accelerate.utils import gather_object

        from mutualrl.ops.checkpoint_files import checkpoint_files, drop_manifest, merge_rank_reports, write_manifest
        from mutualrl.training.regime_state import save_regime_state
        from mutualrl.training.stop_request import SAVING

        folder = Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        if self.regime.phase_hook is not None:  # the launcher's stop waits for a policy that says it is saving
            self.regime.phase_hook(SAVING)
        with storage_errors(folder):
            if self.args.should_save:
                drop_manifest(folder)
            super()._save_checkpoint(model, trial)
            if self.args.should_save:
                umask_file_modes(folder)  # weights readable as the user's umask says, before the manifest
                save_regime_state(folder, self.regime, self.state.global_step)
            time.sleep(fault_injection.save_delay(self.policy_name))  # a slow filesystem on purpose (tests)
            self.accelerator.wait_for_everyone()  # every rank's shards and RNG state are on disk
            # what each rank sees it wrote: another machine's shards may not be in rank 0's view of a shared folder yet
            reports = gather_object([checkpoint_files(folder)])
            if self.args.should_save:
                write_manifest(folder, self.state.global_step, merge_rank_reports(reports))
        if self.regime.phase_hook is not None:  # saved: a later stop must not wait on a save long done
            self.regime.phase_hook("training")

    def _save_optimizer_and_scheduler(self, output_dir):
        """Transformers' own; :func:`mutualrl.fault_injection.disk_full` can fill the disk here, the weights already written."""
        from mutualrl import fault_injection

        fault_injection.disk_full(f"{output_dir}/optimizer.pt")
        super()._save_optimizer_and_scheduler(output_dir)

    def _load_optimizer_and_scheduler(self, checkpoint):
        """Transformers' own (called once per resume, on every rank, before the first resumed step), the regime's
        running state (``regime_state``), then proof that the optimizer state came with it: without ``optimizer.pt``
        Trainer goes on with a fresh AdamW and says nothing (this raises instead); the log names the step count
        loaded."""
        from pathlib import Path

        from mutualrl.ops.checkpoint_files import resumed_optimizer_step
        from mutualrl.training.regime_state import load_regime_state

        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            load_regime_state(Path(checkpoint), self.regime)
        if checkpoint is None or self.is_deepspeed_enabled:
            return
        step = resumed_optimizer_step(Path(checkpoint), self.optimizer.state)
        if step is not None and step != self.state.global_step and not self.args.fp16:  # fp16 skips overflowed steps
            from mutualrl.errors import UsageError

            raise UsageError(f"{checkpoint}: its optimizer state has taken {step} steps but its trainer state says "
                             f"step {self.state.global_step}; `mutualrl train --resume` picks the newest "
                             "checkpoint whose files agree")
        log.info("policy %s: resumed from %s with its optimizer state (step count %s)", self.policy_name,
                 checkpoint, "not kept by this optimizer" if step is None else step)

    # -- the rest of the regimes' TrainerView (regimes/core/trainer_interface.py; record_metrics: TRLMetrics) -
    def score_completions(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                          batch_size: int | None = None) -> torch.Tensor:
        """Per-token log-probs of ``completion_ids`` given ``prompt_ids`` under ``model``."""
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logps, _, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1),
            batch_size=batch_size or self.args.per_device_train_batch_size,
        )
        return logps

    def completion_logits(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
        """Next-token logits ``[B, C, V]`` before each completion token, over TRL's temperature: the model's own forward
        (TRL's fused head returns log-probs of the sampled tokens only), keeping the last ``C + 1`` positions."""
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [B, P + C]
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)  # [B, P + C]
        width = completion_ids.size(1)
        with self.accelerator.autocast():
            logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=width + 1,
                           use_cache=False).logits  # [B, C + 1, V]
        return tempered_logits(logits[:, :-1, :], self.temperature)  # [B, C, V] float32: one copy, not two

    def score_reference(self, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
        """Per-token log-probs ``[B, C]`` of the rows under the reference model (for the KL term when beta > 0),
        no grad: TRL's ``ref_model``, or the policy with its PEFT adapter switched to "ref" (or off), as TRL does."""
        rows = (prompt_ids, prompt_mask, completion_ids, completion_mask)
        with torch.no_grad():
            if self.ref_model is not None:
                return self.score_completions(self.ref_model, *rows)  # [B, C]
            from trl.trainer.utils import use_adapter  # the helper TRL uses for its own reference pass

            model = self.accelerator.unwrap_model(self.model)
            with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                return self.score_completions(self.model, *rows)  # [B, C]


def weighted_advantages(advantages: torch.Tensor, weights: torch.Tensor, regime: str) -> torch.Tensor:
    """TRL's advantages times a regime's per-token weights ``[B, T]``: the one place the seam's weight enters the loss.

    Every TRL 1.16 loss (``GRPOTrainer._compute_loss``) is linear in the advantage inside its per-token policy term
    (``-min(r·A, clip(r)·A)``, CISPO's ``-clip(r)·A·logp``, SAPO's, VESPO's), and ``min(w·x, w·y) = w·min(x, y)`` for
    ``w >= 0``; so ``A·w`` multiplies the per-token policy loss by ``w`` and nothing else: the KL term (``beta``), the
    entropy bonus and the loss's token normaliser are unchanged, as with TRL's own vLLM importance weights. Only TRL's
    logged clip ratios, which count clipped tokens by the advantage's sign, leave out tokens of weight 0.
    """
    if weights.dim() != 2 or weights.size(0) != advantages.size(0):
        raise ValueError(f"regime {regime!r}: token weights must be [B, T] with B = {advantages.size(0)}; "
                         f"got {tuple(weights.shape)}")
    if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
        raise ValueError(f"regime {regime!r}: token weights must be finite and >= 0")
    per_row = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages  # [B, 1] or [B, T]
    return per_row * weights.to(per_row.dtype)  # [B, T]

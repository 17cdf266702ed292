"""The SFT step of sequential peer distillation: TRL's ``SFTTrainer`` with SGT's loss, optional LoRA.

Paper, App. "Online Gating versus Sequential Peer Distillation": "Learning rate 2e-5 with
cosine schedule and 0.03 warmup; LoRA (rank=16, alpha=32, dropout=0.05); 1 epoch. The SFT
loss matches the SGT auxiliary NLL but is applied offline." SGT's auxiliary term
(:func:`mutualrl.regimes.core.rescue.rescue_nll`) is the mean over examples of each example's
token-averaged NLL of the peer response; :class:`PeerSFTTrainer` computes exactly that
(``loss_reduction="sequence"``) from TRL's fused per-token log-probs, or TRL's own
token-averaged loss (``"token"``).

The examples come pre-tokenized (``input_ids``, ``labels`` with ``-100`` on the prompt), so
TRL neither re-tokenizes nor adds an EOS: the completion is exactly the peer's text
retokenized by THL, followed by the learner's EOS when the peer's response ended.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mutualrl.config.lora import lora_kwargs
from mutualrl.errors import UsageError

#: The paper's SFT hyper-parameters (everything else: TRL's SFTConfig defaults).
PAPER_SFT: dict[str, Any] = {
    "learning_rate": 2e-5,
    "lr_scheduler_type": "cosine",
    "warmup_steps": 0.03,  # transformers 5: a float in [0, 1) is a ratio of the total steps
    "num_train_epochs": 1.0,
}
LOSS_REDUCTIONS = ("sequence", "token")
#: SFTConfig fields that distill owns.
_OWNED = ("output_dir",)


def split_overrides(overrides: list[tuple[list[str], Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--set`` pairs -> (SFTConfig fields, LoRA fields); unknown names are a one-line usage error."""
    from trl import SFTConfig

    sft_fields = {f.name for f in dataclasses.fields(SFTConfig) if f.init}
    sft: dict[str, Any] = {}
    lora: dict[str, Any] = {}
    for keys, value in overrides:
        name = ".".join(keys)
        if keys[0] == "lora" and len(keys) == 2:
            try:
                lora_kwargs({keys[1]: value})
            except KeyError as err:
                raise UsageError(f"--set {name}: not a field of peft.LoraConfig{err.args[1]}") from None
            lora[keys[1]] = value
            continue
        if len(keys) != 1 or name not in sft_fields:
            close = difflib.get_close_matches(name, sorted(sft_fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UsageError(f"--set {name}: not a field of trl.SFTConfig (nor lora.<peft LoraConfig field>){hint}")
        if name in _OWNED:
            raise UsageError(f"--set {name}: set by mutualrl distill (use --output-dir)")
        sft[name] = value
    return sft, lora


def lora_settings(enabled: bool, overrides: dict[str, Any]) -> dict[str, Any] | None:
    """``LoraConfig`` keyword arguments: the paper's LoRA with ``--set lora.*`` applied; None for full weights."""
    if not enabled:
        if overrides:
            raise UsageError(f"--set lora.{next(iter(overrides))}: LoRA settings need --lora (not --full)")
        return None
    return lora_kwargs(overrides)


def sft_kwargs(output_dir: Path, *, device: str, seed: int, gradient_checkpointing: bool | None,
               max_steps: int | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """SFTConfig keyword arguments: the paper's settings < device adaptation < ``--set`` overrides."""
    import torch

    kwargs: dict[str, Any] = {**PAPER_SFT, "output_dir": str(output_dir), "seed": seed, "report_to": [],
                              "save_strategy": "no", "max_length": None, "logging_steps": 1, "disable_tqdm": True}
    if gradient_checkpointing is not None:  # transformers 5 renamed it activation_checkpointing
        from trl import SFTConfig

        names = {f.name for f in dataclasses.fields(SFTConfig)}
        kwargs["activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"] = (
            gradient_checkpointing)
    if device == "cpu" or not torch.cuda.is_available():
        kwargs.update(use_cpu=True, bf16=False, fp16=False)
    else:
        kwargs.update(bf16=torch.cuda.is_bf16_supported(), fp16=False)
    if max_steps is not None:
        kwargs["max_steps"] = max_steps
    kwargs.update(overrides)
    return kwargs


def build_sft_config(kwargs: dict[str, Any]) -> Any:
    from trl import SFTConfig

    try:
        return SFTConfig(**kwargs)
    except (ValueError, TypeError) as err:
        raise UsageError(f"SFT settings rejected by trl.SFTConfig: {err}") from None


def _peer_sft_trainer_class() -> type:
    from trl import SFTTrainer

    from mutualrl.training.trl_metrics import TRLMetrics

    class PeerSFTTrainer(TRLMetrics, SFTTrainer):
        """SFTTrainer whose loss is SGT's: the mean over examples of each one's token-averaged NLL."""

        loss_reduction = "sequence"

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if self.loss_reduction == "token":
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            mode = "train" if self.model.training else "eval"
            inputs["use_cache"] = False
            outputs = model(**inputs, fused_lm_head=True)
            mask = outputs.label_mask.to(outputs.log_probs.dtype)
            tokens = mask.sum(dim=1)
            rows = tokens > 0
            per_example = -(outputs.log_probs * mask).sum(dim=1) / tokens.clamp(min=1)
            # Mean over the micro-batch's examples; Trainer divides by the accumulation steps
            # (loss_is_scaled_for_ga = False), giving the mean over the optimizer step's examples.
            loss = per_example[rows].sum() / rows.sum().clamp(min=1)
            with_tokens = self.accelerator.gather_for_metrics(tokens.sum()).sum()
            if outputs.entropy is not None:
                entropy = self.accelerator.gather_for_metrics(outputs.entropy.detach().sum()).sum()
                self.record_metrics({"entropy": (entropy / with_tokens).item() if with_tokens > 0 else 0.0}, mode)
            if outputs.is_top1 is not None:
                correct = self.accelerator.gather_for_metrics(outputs.is_top1.sum()).sum()
                self.record_metrics({"mean_token_accuracy": (correct / with_tokens).item() if with_tokens > 0
                                     else 0.0}, mode)
            return (loss, outputs) if return_outputs else loss

    return PeerSFTTrainer


def _status_callback(on_status: Callable[[str], None]) -> Any:
    from transformers import TrainerCallback

    class SFTStatus(TrainerCallback):
        """About ten one-line progress reports per run (TRL's own bar and log printer are off)."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            every = max(1, state.max_steps // 10)
            if logs and "loss" in logs and (state.global_step % every == 0 or state.global_step == state.max_steps):
                on_status(f"SFT step {state.global_step}/{state.max_steps}: loss {logs['loss']:.4f}")

    return SFTStatus()


def train_sft(model: Any, tokenizer: Any, rows: list[dict[str, list[int]]], config: Any,
              lora: dict[str, Any] | None, loss_reduction: str, adapter_dir: Path | None = None,
              on_status: Callable[[str], None] | None = None) -> tuple[Any, dict[str, Any]]:
    """Fine-tune ``model`` on pre-tokenized ``rows``; returns the trained model (LoRA merged into it) and stats.

    With LoRA the adapter itself is saved to ``adapter_dir`` (when given) before it is merged.
    """
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback

    if loss_reduction not in LOSS_REDUCTIONS:
        raise UsageError(f"--loss-reduction must be one of {', '.join(LOSS_REDUCTIONS)}, got {loss_reduction!r}")
    peft_config = None
    if lora is not None:
        from peft import LoraConfig

        peft_config = LoraConfig(**lora)
    dataset = Dataset.from_list([{"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows])
    trainer = _peer_sft_trainer_class()(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                                        peft_config=peft_config)
    trainer.remove_callback(PrinterCallback)
    if on_status is not None:
        trainer.add_callback(_status_callback(on_status))
    trainer.loss_reduction = loss_reduction
    if loss_reduction == "sequence":
        trainer.loss_is_scaled_for_ga = False
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    output = trainer.train()
    trained = trainer.model
    if lora is not None:
        if adapter_dir is not None:
            trained.save_pretrained(str(adapter_dir))
        trained = trained.merge_and_unload()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    stats = {
        "steps": int(trainer.state.global_step),
        "epochs": float(trainer.state.epoch or 0.0),
        "train_loss": float(output.training_loss),
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "trainable_parameters": int(trainable),
    }
    return trained, stats

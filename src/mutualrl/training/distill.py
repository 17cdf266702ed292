"""Sequential peer distillation: SFT of a learner on its peer's harvested successes (behind `mutualrl distill`).

Paper, App. "Online Gating versus Sequential Peer Distillation" (Fig. "naive_sft"), the
control that removes SGT's online failure gate and its interleaving with GRPO:

1. Phase 1 -- two models trained independently with standalone GRPO; every distinct
   successful trajectory of their training runs is harvested
   (:func:`mutualrl.see.harvest.harvest_successes` on a run recorded with
   ``--set see.record_standalone=true --set see.retention_steps=null``).
2. Phase 2 -- the learner's final model is fine-tuned with SFT on its *peer's* successes:
   the prompt in the learner's own template (the ids its GRPO run and validation saw), the
   completion the peer's response text retokenized by THL with the learner's tokenizer, plus
   the learner's EOS when the peer's response ended -- exactly what SGT's auxiliary NLL scores
   (:mod:`mutualrl.regimes.sgt.adapter`), offline, on every prompt, with no gate and no GRPO.

Held-out greedy reward@1 of the learner before and after the SFT is measured with the
evaluation code on the run's own held-out prompts (``RUN/data/eval.jsonl``), overall, per
task and per task group.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_json_atomic
from mutualrl.config.schema import PolicyConfig, RunConfig
from mutualrl.errors import UnknownNameError, UsageError
from mutualrl.output_guards import refuse_links_below
from mutualrl.regimes.standalone.spec import STANDALONE
from mutualrl.run_folder import RunPaths, read_json_or
from mutualrl.see.harvest import Harvest, Success, harvest_successes, see_root_of

#: Marks an output folder as written by `mutualrl distill` (``--overwrite`` deletes only such folders).
MARKER = ".mutualrl-distill"
SUMMARY_FORMAT = "mutualrl-distill"


@dataclass
class DistillOptions:
    run_dir: Path
    learner: str
    peer: str | None = None
    peer_run: Path | None = None  # the peer's run folder, when it is not ``run_dir``
    output_dir: Path | None = None  # default RUN/distill/<learner>-from-<peer>
    lora: bool = True  # the paper's LoRA SFT; False: full weights
    loss_reduction: str = "sequence"  # SGT's (mean of per-example token means) or "token" (TRL's)
    max_steps: int | None = None  # cap on optimizer steps (default: one epoch)
    success_threshold: float | None = None  # default: the run's regime.sgt.success_threshold (0.8)
    overrides: list[str] = field(default_factory=list)  # SFTConfig fields and lora.* as KEY=VALUE
    evaluate: bool = True
    eval_limit: int | None = None
    device: str = "auto"
    backend: str = "auto"
    overwrite: bool = False


@dataclass
class DistillPlan:
    """Everything resolved and checked before any model is loaded."""

    options: DistillOptions
    paths: RunPaths
    config: RunConfig
    learner: PolicyConfig
    peer: str
    peer_run: Path
    start_model: Path
    output: Path
    harvest: Harvest
    successes: list[Success]
    sft_overrides: dict[str, Any]
    lora: dict[str, Any] | None  # peft LoraConfig keyword arguments; None: full weights
    max_completion_tokens: int
    warnings: list[str]


def load_run(run_dir: Path) -> tuple[RunPaths, RunConfig]:
    from mutualrl.config.resolved import load_resolved_config

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run folder")
    paths = RunPaths(run_dir.resolve())
    if not paths.config.is_file():
        raise UsageError(f"{run_dir}: not a mutualrl run folder (no config.yaml)")
    return paths, load_resolved_config(paths)


def _policy(config: RunConfig, name: str, option: str, where: Path) -> PolicyConfig:
    names = [p.name for p in config.pool.policies]
    for policy in config.pool.policies:
        if policy.name == name:
            return policy
    raise UnknownNameError(f"{option}: no policy {name!r} in run {where} (policies: {', '.join(names)})")


def _pick_peer(options: DistillOptions, peer_config: RunConfig, peer_run: Path) -> str:
    if options.peer is not None:
        _policy(peer_config, options.peer, "--peer", peer_run)
        if options.peer == options.learner and peer_run == Path(options.run_dir).resolve():
            raise UsageError(f"--peer {options.peer}: the learner distils from another policy, not itself")
        return options.peer
    others = [p.name for p in peer_config.pool.policies
              if not (p.name == options.learner and peer_run == Path(options.run_dir).resolve())]
    if len(others) != 1:
        raise UsageError(f"--peer: run {peer_run} has {len(others)} candidate peers ({', '.join(others)}); "
                         "name one with --peer")
    return others[0]


def max_completion_tokens(config: RunConfig, policy: PolicyConfig) -> int:
    """The learner's GRPO completion length: SGT truncates a retokenized peer success to it."""
    from mutualrl.config.grpo_schema import grpo_default

    value = {**config.grpo, **policy.grpo}.get("max_completion_length")
    return int(grpo_default("max_completion_length") if value is None else value)


def plan_distill(options: DistillOptions) -> DistillPlan:
    """Check every input and harvest the peer's successes; one-line errors for anything wrong."""
    from mutualrl.config.loader import parse_override
    from mutualrl.training.distill_sft import (
        LOSS_REDUCTIONS,
        lora_settings,
        split_overrides,
    )

    if options.loss_reduction not in LOSS_REDUCTIONS:
        raise UsageError(f"--loss-reduction must be one of {', '.join(LOSS_REDUCTIONS)}, "
                         f"got {options.loss_reduction!r}")
    sft_overrides, lora_overrides = split_overrides([parse_override(text) for text in options.overrides])
    lora = lora_settings(options.lora, lora_overrides)
    paths, config = load_run(options.run_dir)
    learner = _policy(config, options.learner, "--learner", options.run_dir)
    peer_run = Path(options.peer_run).resolve() if options.peer_run is not None else paths.root
    peer_config = config if peer_run == paths.root else load_run(peer_run)[1]
    peer = _pick_peer(options, peer_config, peer_run)
    start = paths.final_model(learner.name)
    if not start.is_dir():
        status = _run_status(paths)
        raise UsageError(f"{start}: no final model of {learner.name!r} (run status: {status}); distill starts from "
                         "the learner's trained model, so the run must have finished")
    output = Path(options.output_dir) if options.output_dir is not None else (
        paths.root / "distill" / f"{learner.name}-from-{peer}")
    _check_output(output, options.overwrite, paths.root if options.output_dir is None else output.parent)
    threshold = options.success_threshold
    if threshold is None:
        threshold = peer_config.regime.sgt.success_threshold
    see_root = see_root_of(peer_config.see.dir or peer_run)
    harvest = harvest_successes(see_root, success_threshold=threshold, policies=[peer])
    successes = harvest.successes.get(peer, [])
    if not successes:
        raise UsageError(f"policy {peer!r} has no success (reward > {threshold:g}) in its "
                         f"{harvest.records.get(peer, 0)} recorded rollouts over {len(harvest.steps)} step(s) of "
                         f"{see_root}: nothing to distil")
    warnings = []
    if peer_config.regime.name != STANDALONE.name:
        warnings.append(f"the peer's run trained with regime {peer_config.regime.name!r}; the paper's control "
                        "harvests standalone GRPO runs")
    if harvest.steps and harvest.steps[0] > 0:
        warnings.append(f"the exchange starts at step {harvest.steps[0]}: earlier steps were pruned "
                        f"(see.retention_steps={peer_config.see.retention_steps}), so their successes are missing; "
                        "record with --set see.retention_steps=null")
    if harvest.incomplete:
        warnings.append(f"skipped {len(harvest.incomplete)} step(s) where some rank never committed")
    return DistillPlan(options, paths, config, learner, peer, peer_run, start, output, harvest, successes,
                       sft_overrides, lora, max_completion_tokens(config, learner), warnings)


def _run_status(paths: RunPaths) -> str:
    return str(read_json_or(paths.run_json, {}).get("status", "unknown"))


def _check_output(output: Path, overwrite: bool, named: Path) -> None:
    """``named``: the folder the user named (the run folder, for the default output): nothing from it down to
    ``output`` may be a link, since ``--overwrite`` deletes ``output`` and the model is written into it."""
    refuse_links_below(named, output)
    if output.exists() and not output.is_dir():
        raise UsageError(f"--output-dir {output}: exists and is not a folder")
    if not output.exists() or not any(output.iterdir()):
        return
    if not overwrite:
        raise UsageError(f"--output-dir {output}: already exists; pass --overwrite to replace it")
    if not (output / MARKER).is_file():
        raise UsageError(f"--output-dir {output}: not written by mutualrl distill (no {MARKER}); nothing deleted")


def sft_rows(successes: list[Success], tokenizer: Any, chat_template: bool,
             max_completion_tokens: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Pre-tokenized SFT examples: the learner's prompt ids, then the peer's text in the learner's tokens.

    As SGT's rescue target: the response is retokenized as a continuation of the prompt (THL),
    the learner's EOS is appended when the peer's response ended with EOS, and the result is
    cut to the learner's GRPO completion length. ``labels`` is ``-100`` on the prompt.
    """
    from mutualrl.evaluation.generate import prompt_token_ids
    from mutualrl.thl import retokenize

    eos = tokenizer.eos_token_id
    encoded = retokenize(tokenizer, [s.response_text for s in successes])
    rows, stats = [], {"truncated": 0, "empty": 0}
    for success, retok in zip(successes, encoded, strict=True):
        completion = list(retok.ids)
        if success.finished and eos is not None:
            completion.append(int(eos))
        if len(completion) > max_completion_tokens:
            completion = completion[:max_completion_tokens]
            stats["truncated"] += 1
        if not completion:
            stats["empty"] += 1
            continue
        prompt = prompt_token_ids(tokenizer, success.prompt_text, chat_template)
        rows.append({"prompt_id": success.prompt_id, "prompt": success.prompt_text,
                     "completion": success.response_text, "input_ids": prompt + completion,
                     "labels": [-100] * len(prompt) + completion})
    return rows, stats


def load_start_model(plan: DistillPlan, dtype: str, device: str) -> Any:
    """The learner's trained model (a GRPO LoRA adapter in final/ is merged into its base)."""
    from mutualrl.pools.loading import load_model_or_adapter

    return load_model_or_adapter(str(plan.start_model), dtype, device, base=plan.learner.model,
                                 init_adapter=plan.learner.init_adapter)


def train_distill(plan: DistillPlan, on_status: Callable[[str], None] = lambda msg: None) -> dict[str, Any]:
    """Phase 2's SFT: write the examples, fine-tune, save the model; returns the summary so far."""
    from mutualrl.pools.loading import load_tokenizer_for
    from mutualrl.training.data import uses_chat_template
    from mutualrl.training.distill_sft import build_sft_config, sft_kwargs, train_sft

    started = time.perf_counter()
    options, config, learner = plan.options, plan.config, plan.learner
    tokenizer = load_tokenizer_for(learner.model, learner.tokenizer)
    chat = uses_chat_template(tokenizer, learner.chat_template)
    rows, row_stats = sft_rows(plan.successes, tokenizer, chat, plan.max_completion_tokens)
    if not rows:
        raise UsageError(f"every success of {plan.peer!r} is empty in {learner.name!r}'s tokens: nothing to distil")
    if plan.output.exists():
        shutil.rmtree(plan.output)
    plan.output.mkdir(parents=True)
    (plan.output / MARKER).write_text("written by mutualrl distill\n")
    with (plan.output / "data.jsonl").open("w") as fh:
        for row in rows:
            fh.write(json.dumps({k: row[k] for k in ("prompt_id", "prompt", "completion")}) + "\n")
    device = "cpu" if options.device == "cpu" else "auto"
    kwargs = sft_kwargs(plan.output / "trainer", device=device, seed=int(config.grpo.get("seed", 42)),
                        gradient_checkpointing=_checkpointing({**config.grpo, **learner.grpo}),
                        max_steps=options.max_steps, overrides=plan.sft_overrides)
    sft_config = build_sft_config(kwargs)
    on_status(f"SFT of {learner.name} on {len(rows)} successes of {plan.peer} "
              f"({'LoRA' if plan.lora else 'full weights'}, lr {sft_config.learning_rate:g})")
    model = load_start_model(plan, "float32" if learner.dtype == "auto" else learner.dtype,
                             "cpu" if sft_config.use_cpu else None)
    model_dir = plan.output / "model"
    adapter_dir = plan.output / "adapter" if plan.lora is not None else None
    trained, sft_stats = train_sft(model, tokenizer, rows, sft_config, plan.lora, options.loss_reduction, adapter_dir,
                                   on_status)
    trained.save_pretrained(str(model_dir))
    tokenizer.save_pretrained(str(model_dir))
    from mutualrl.assets.cache import umask_file_modes

    umask_file_modes(model_dir)  # transformers writes the weights 0600
    del model, trained
    summary: dict[str, Any] = {
        "format": SUMMARY_FORMAT,
        "run_dir": str(plan.paths.root),
        "peer_run_dir": str(plan.peer_run),
        "learner": learner.name,
        "peer": plan.peer,
        "start_model": str(plan.start_model),
        "model": str(model_dir),
        "adapter": str(adapter_dir) if adapter_dir is not None else None,
        "harvest": plan.harvest.summary(plan.peer),
        "examples": len(rows),
        "examples_truncated": row_stats["truncated"],
        "examples_empty": row_stats["empty"],
        "chat_template": chat,
        "max_completion_tokens": plan.max_completion_tokens,
        "sft": {**_sft_settings(sft_config, plan.lora, options.loss_reduction), **sft_stats},
        "warnings": plan.warnings,
        "seconds_sft": round(time.perf_counter() - started, 3),
    }
    write_json_atomic(plan.output / "summary.json", summary)
    return summary


def finish_distill(plan: DistillPlan, summary: dict[str, Any], on_status: Callable[[str], None] = lambda msg: None,
                   progress_factory: Callable[[str, int], Callable[[int], None]] | None = None) -> dict[str, Any]:
    """Evaluate before/after (unless --no-eval) and write the final summary."""
    started = time.perf_counter()
    if plan.options.evaluate:
        summary["eval"] = evaluate_before_after(plan, summary["chat_template"], on_status, progress_factory)
        summary["seconds_eval"] = round(time.perf_counter() - started, 3)
    write_json_atomic(plan.output / "summary.json", summary)
    return summary


def _checkpointing(grpo: dict[str, Any]) -> bool | None:
    """The learner's GRPO activation checkpointing setting (None: TRL's default)."""
    for key in ("activation_checkpointing", "gradient_checkpointing"):
        if grpo.get(key) is not None:
            return bool(grpo[key])
    return None


def _sft_settings(config: Any, lora: dict[str, Any] | None, loss_reduction: str) -> dict[str, Any]:
    return {
        "learning_rate": config.learning_rate,
        "lr_scheduler_type": str(getattr(config.lr_scheduler_type, "value", config.lr_scheduler_type)),
        "warmup_steps": config.warmup_steps,
        "num_train_epochs": config.num_train_epochs,
        "max_steps": config.max_steps,
        "per_device_train_batch_size": config.per_device_train_batch_size,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        "seed": config.seed,
        "loss": f"completion-only NLL, {loss_reduction}-averaged",
        "lora": None if lora is None else {k: v for k, v in lora.items() if k != "task_type"},
    }


def evaluate_before_after(plan: DistillPlan, chat: bool, on_status: Callable[[str], None],
                          progress_factory: Callable[[str, int], Callable[[int], None]] | None) -> dict[str, Any]:
    """Greedy reward@1 of the learner before and after the SFT on the run's held-out prompts (same code, same settings)."""
    from mutualrl.evaluation.runner import EvalTarget, run_eval
    from mutualrl.tasks.registry import task_groups
    from mutualrl.training.data import EVAL_FILE, read_examples

    config, learner = plan.config, plan.learner
    eval_file = plan.paths.data / EVAL_FILE
    if not eval_file.is_file():
        plan.warnings.append(f"no held-out prompts ({eval_file}): nothing evaluated")
        return {}
    examples = read_examples(eval_file)[: plan.options.eval_limit]
    targets = [EvalTarget(name="before", model=str(plan.start_model), tokenizer=learner.tokenizer,
                          chat_template=chat, dtype=learner.dtype),
               EvalTarget(name="after", model=str(plan.output / "model"), tokenizer=learner.tokenizer,
                          chat_template=chat, dtype=learner.dtype)]
    max_new = config.validation.max_new_tokens or plan.max_completion_tokens
    results, _ = run_eval(targets, examples, max_new_tokens=max_new, batch_size=config.validation.batch_size,
                          device=plan.options.device, backend=plan.options.backend, verifier=config.task.verifier,
                          on_status=on_status, progress_factory=progress_factory)
    groups = task_groups(config.task.name, examples)
    out: dict[str, Any] = {"file": str(eval_file), "n": len(examples), "max_new_tokens": max_new,
                           "verifier": config.task.verifier}
    for result in results:
        result.save(plan.output / "eval" / f"{result.policy}.json")
        out[result.policy] = {"reward@1": result.reward_at_1, "tasks": result.reward_at_1_by_task(),
                              "groups": result.reward_at_1_by_group(groups)}
    before, after = out["before"]["reward@1"], out["after"]["reward@1"]
    out["change"] = None if before is None or after is None else after - before
    return out

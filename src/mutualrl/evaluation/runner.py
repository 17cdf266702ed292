"""Evaluate a pool, a recipe or a list of models on a task suite (behind `mutualrl eval`).

Every model sees the same prompts: the suite is loaded once, and a prompt too long for
any model's tokenizer is dropped for all of them (the paper's joint 1,024-token filter),
so the results line up prompt by prompt for `mutualrl complementarity`.
"""

from __future__ import annotations

import gc
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.errors import DataError, UsageError
from mutualrl.evaluation.generate import (
    evaluate_examples,
    evaluate_examples_vllm,
    prompt_token_ids,
    resolve_chat_template,
    vllm_available,
)
from mutualrl.evaluation.results import ModelEvalResult
from mutualrl.tasks.base import TaskExample

BACKENDS = ("auto", "transformers", "vllm")


@dataclass
class EvalTarget:
    """One model to evaluate: a pool policy or a model given on the command line."""

    name: str
    model: str
    tokenizer: str | None = None
    chat_template: bool | None = None
    dtype: str = "auto"
    base_model: str | None = None  # a LoRA adapter's base (the policy's model); None: the base the adapter names
    init_adapter: str | None = None  # the policy's warm start, merged into its model first (pool.policies.*)
    init_adapter_build: str | None = None  # the command that builds it, named when it is missing


@dataclass
class TargetSet:
    targets: list[EvalTarget]
    label: str  # for default file names
    recipe: Any = None  # the RunConfig when the target was a pool or recipe
    run_folder: Path | None = None  # when the target was a run folder (its own held-out prompts are evaluated)


def _is_recipe(target: str) -> bool:
    from mutualrl.config.loader import pool_recipe_path

    if target.endswith((".yaml", ".yml")):
        return True
    if "," in target or "/" in target or ":" in target:
        return False
    try:
        return pool_recipe_path(target).is_file()
    except FileNotFoundError:
        return False


def resolve_targets(target: str, tokenizer: str | None = None, chat_template: bool | None = None) -> TargetSet:
    """A pool name, a recipe path, or comma-separated models -> what to evaluate."""
    target = target.strip()
    if not target:
        raise UsageError("no models to evaluate: give a pool name, a recipe path or comma-separated models")
    if _is_recipe(target):
        from mutualrl.config.loader import load_run_config

        config = load_run_config(target, check_grpo=False).config
        return TargetSet(recipe_targets(config, tokenizer, chat_template), config.pool.name, config)
    models = [m.strip() for m in target.split(",") if m.strip()]
    if not models:
        raise UsageError(f"{target!r} names no model to evaluate: give a pool name, a recipe path or "
                         "comma-separated models")
    names: list[str] = []
    targets = []
    for m in models:
        check_model_folder(m)
        name = local_model_name(Path(m)) if Path(m).exists() else m
        name = name.removeprefix("builtin:")
        base, k = name, 2
        while name in names:
            name = f"{base}-{k}"
            k += 1
        names.append(name)
        if chat_template is None and Path(m).is_dir():  # a run's policy folder: the form the run trained it on
            from mutualrl.config.resolved import policy_chat_template

            trained = policy_chat_template(Path(m))
        else:
            trained = None
        targets.append(EvalTarget(name=name, model=m, tokenizer=tokenizer,
                                  chat_template=chat_template if trained is None else trained))
    label = "+".join(re.sub(r"[^A-Za-z0-9._-]+", "_", n) for n in names)[:80]
    return TargetSet(targets, label)


def recipe_targets(config: Any, tokenizer: str | None = None, chat_template: bool | None = None) -> list[EvalTarget]:
    """The policies of a resolved recipe (a ``RunConfig``) as models to evaluate, each with its own settings
    (``tokenizer`` and ``chat_template``, when given, for every one)."""
    return [EvalTarget(name=p.name, model=p.model, tokenizer=tokenizer or p.tokenizer,
                       chat_template=p.chat_template if chat_template is None else chat_template, dtype=p.dtype,
                       init_adapter=p.init_adapter, init_adapter_build=p.init_adapter_build)
            for p in config.pool.policies]


def local_model_name(folder: Path) -> str:
    """A model folder's name in results: ``tiny-bpe/checkpoint-8`` for ``RUN/policies/tiny-bpe/checkpoint-8``
    (every policy has a ``final`` and ``checkpoint-N``: the folder alone would not say whose), else the folder."""
    folder = folder.resolve()
    if folder.parent.parent.name == "policies":
        return f"{folder.parent.name}/{folder.name}"
    return folder.name


def check_model_folder(model: str) -> None:
    """A local folder given as a model holds one (``config.json``); else name the model folders inside it,
    instead of the tokenizer error transformers gives for a folder with no model."""
    from mutualrl.pools.loading import is_adapter_folder

    folder = Path(model)
    if not folder.is_dir() or (folder / "config.json").is_file() or is_adapter_folder(model):
        return
    inside = sorted({str(p.parent) for p in [*folder.glob("*/config.json"), *folder.glob("*/*/config.json")]})
    hint = f"; model folders in it: {', '.join(inside[:6])}{' ...' if len(inside) > 6 else ''}" if inside else ""
    raise UsageError(f"{model}: not a model folder (no config.json){hint}")


def check_weight_files(model: str) -> None:
    """Every safetensors file of a local model folder opens (its header, and the file as long as the header says):
    a file cut short is one :class:`DataError` naming it, not the loader's traceback halfway through the models."""
    from safetensors import safe_open

    folder = Path(model)
    if not folder.is_dir():
        return
    for path in sorted(folder.rglob("*.safetensors")):
        try:
            with safe_open(str(path), framework="np"):
                pass
        except Exception as err:  # noqa: BLE001 - SafetensorError, OSError: the file cannot be loaded
            raise DataError(f"{path}: damaged weights ({str(err).splitlines()[0] if str(err) else type(err).__name__}"
                            "); the model cannot be evaluated (evaluate another checkpoint)") from None


def load_suite(
    tasks: list[str],
    *,
    split: str | None = None,
    source: str | None = None,
    limit: int | None = None,
    task_config: Any = None,
) -> list[TaskExample]:
    """Every task's examples (``split`` or each task's default evaluation split), concatenated; the task a
    recipe's ``task_config`` names is read with its split settings (a ``dataset`` task's held-out rows)."""
    from mutualrl.tasks.registry import get_task, task_from_config

    examples: list[TaskExample] = []
    for name in tasks:
        task = task_from_config(task_config) if task_config is not None and task_config.name == name else get_task(name)
        examples.extend(task.load(split or task.default_eval_split, source, limit))
    return examples


def joint_length_filter(
    examples: list[TaskExample], tokenized: dict[str, list[list[int]]], max_prompt_tokens: int | None
) -> tuple[list[int], int]:
    """Indices of examples whose prompt fits ``max_prompt_tokens`` for EVERY model; and how many were dropped."""
    if max_prompt_tokens is None:
        return list(range(len(examples))), 0
    keep = [i for i in range(len(examples)) if all(len(ids[i]) <= max_prompt_tokens for ids in tokenized.values())]
    return keep, len(examples) - len(keep)


def pick_backend(backend: str, device: str = "auto") -> str:
    """The evaluation backend. vLLM takes the first visible GPU whatever ``--device`` says, so a device other than
    the first GPU (``cpu``, ``cuda:1``) on a CUDA machine makes ``auto`` transformers and ``vllm`` an error."""
    if backend not in BACKENDS:
        raise UsageError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    import torch

    elsewhere = torch.cuda.is_available() and device not in ("auto", "cuda", "cuda:0")
    if backend == "auto":  # on a CPU an engine start (about a minute) outweighs vLLM's speed for evaluation
        return "vllm" if torch.cuda.is_available() and vllm_available() and not elsewhere else "transformers"
    if backend == "vllm" and elsewhere:
        raise UsageError(f"--backend vllm runs on the first visible GPU, not --device {device}: choose the GPU with "
                         "CUDA_VISIBLE_DEVICES and --device cuda, or use --backend transformers")
    if backend == "vllm" and not vllm_available():
        raise UsageError("--backend vllm needs vllm with a CUDA device, or a usable CPU build of vLLM "
                         "(mutualrl doctor says why not)")
    return backend


def pick_device(device: str) -> str:
    """``auto`` -> cuda when available, else cpu; anything else must be a torch device this machine has."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise UsageError(f"--device: {device!r} is not a device; expected auto, cpu, cuda or cuda:N") from None
    if parsed.type == "cuda" and (not torch.cuda.is_available() or (parsed.index or 0) >= torch.cuda.device_count()):
        raise UsageError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if parsed.type not in ("cpu", "cuda", "mps"):
        raise UsageError(f"--device: {device!r} is not supported; expected auto, cpu, cuda or cuda:N")
    return device


def run_eval(
    targets: list[EvalTarget],
    examples: list[TaskExample],
    *,
    max_new_tokens: int,
    batch_size: int,
    device: str = "auto",
    backend: str = "auto",
    verifier: Any = "default",  # a verifier mode, or a run's RewardSpec (its reward functions)
    max_prompt_tokens: int | None = None,
    split: str | None = None,
    on_status: Callable[[str], None] = lambda msg: None,
    progress_factory: Callable[[str, int], Callable[[int], None]] | None = None,
) -> tuple[list[ModelEvalResult], int]:
    """Evaluate each target on ``examples``; returns the results and the number of prompts dropped as too long."""
    device = pick_device(device)
    backend = pick_backend(backend, device)
    tokenizers, chat, tokenized = tokenize_prompts(targets, examples, on_status)
    keep, dropped = joint_length_filter(examples, tokenized, max_prompt_tokens)
    kept = [examples[i] for i in keep]
    if not kept:
        raise UsageError(f"no prompt fits --max-prompt-tokens {max_prompt_tokens} for every model")
    results = []
    for t in targets:
        progress = progress_factory(t.name, len(kept)) if progress_factory else None
        result = evaluate_target(t, tokenizers[t.name], chat[t.name], kept, max_new_tokens=max_new_tokens,
                                 batch_size=batch_size, device=device, backend=backend, verifier=verifier,
                                 on_status=on_status, progress=progress)
        result.split = split
        result.settings["max_prompt_tokens"] = max_prompt_tokens
        result.settings["dropped_too_long"] = dropped
        results.append(result)
    return results, dropped


def tokenize_prompts(targets: list[EvalTarget], examples: list[TaskExample], on_status: Callable[[str], None]
                     ) -> tuple[dict[str, Any], dict[str, bool], dict[str, list[list[int]]]]:
    """Per target: its tokenizer, whether it takes the chat template, and every prompt's token ids (for the joint
    length filter); each model's weight files and adapter config checked first, before any model loads."""
    from mutualrl.pools.loading import check_adapter_config, check_init_adapter, load_tokenizer_for

    tokenizers = {}
    tokenized: dict[str, list[list[int]]] = {}
    chat: dict[str, bool] = {}
    for t in targets:
        check_weight_files(t.model)
        check_adapter_config(t.model)  # before any model loads: a damaged one is one line, not peft's traceback
        check_init_adapter(t.name, t.init_adapter, t.init_adapter_build)
        on_status(f"loading tokenizer of {t.name}")
        tok = load_tokenizer_for(t.model, t.tokenizer)
        tokenizers[t.name] = tok
        chat[t.name] = resolve_chat_template(t.chat_template, tok, t.model)
        tokenized[t.name] = [prompt_token_ids(tok, ex.for_policy(chat[t.name]), chat[t.name]) for ex in examples]
    return tokenizers, chat, tokenized


def evaluate_target(t: EvalTarget, tokenizer: Any, chat_template: bool, kept: list[TaskExample], *,
                    max_new_tokens: int, batch_size: int, device: str, backend: str, verifier: Any,
                    on_status: Callable[[str], None], progress: Callable[[int], None] | None) -> ModelEvalResult:
    """One target's result on the ``kept`` prompts: generated by vLLM, or by the model loaded on ``device``, which
    is freed after."""
    from mutualrl.pools.loading import is_adapter_folder, load_model_or_adapter, resolve_model_path

    if backend == "vllm" and not is_adapter_folder(t.model) and t.init_adapter is None:  # merged here instead
        on_status(f"evaluating {t.name} with vLLM")
        return evaluate_examples_vllm(
            resolve_model_path(t.model), tokenizer, kept, max_new_tokens=max_new_tokens,
            chat_template=chat_template, progress=progress, model_name=t.model, policy=t.name,
            dtype=t.dtype if t.dtype != "auto" else "auto", verifier=verifier,
        )
    on_status(f"loading {t.name} ({t.model}) on {device}")
    start = time.perf_counter()
    model = load_model_or_adapter(t.model, t.dtype, device, base=t.base_model, init_adapter=t.init_adapter)
    load_s = time.perf_counter() - start
    on_status(f"{t.name} loaded ({load_s:.0f} s); generating {len(kept)} prompts, {batch_size} at a time")
    result = evaluate_examples(
        model, tokenizer, kept, max_new_tokens=max_new_tokens, batch_size=batch_size,
        chat_template=chat_template, progress=progress, model_name=t.model, policy=t.name, verifier=verifier,
    )
    result.settings["load_seconds"] = round(load_s, 3)
    result.settings["device"] = device
    del model
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
    return result

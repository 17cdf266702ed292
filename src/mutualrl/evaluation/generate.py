"""Greedy evaluation: one completion per prompt, scored by each example's task verifier or a run's reward functions.

Paper, App. "Implementation details": "For validation we decode a single completion per
prompt with temperature 0 (no sampling)"; reward@1 is the mean verifier reward. Two
backends produce the completions from the same token ids:

- transformers ``generate`` (CPU or GPU): left padding, greedy, stop at EOS
  (:mod:`mutualrl.pools.greedy`, shared with the tiny pool's warm start) -- used by the
  training loop's validation hook through :func:`evaluate_examples`;
- vLLM (``vllm.LLM`` at temperature 0) when vllm can run here (CUDA, or a usable CPU build of
  vLLM: :mod:`mutualrl.host.vllm_cpu`) -- :func:`evaluate_examples_vllm` (its own engine) and
  :func:`evaluate_examples_llm` (an engine already running: a training run's colocated one,
  synced to the policy's weights), imported lazily so other code never imports vllm.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import time
from collections.abc import Sequence
from typing import Any

from mutualrl.evaluation.results import ModelEvalResult, PromptResult
from mutualrl.pools.greedy import (
    Progress,
    decode_completion,
    eos_token_ids,
    generate_greedy,
    ignored_generation_settings,
)
from mutualrl.pools.template_render import bounded_render, tokenizer_name
from mutualrl.tasks.base import Task, TaskExample
from mutualrl.tasks.reward_form import in_dataset_form
from mutualrl.tasks.reward_funcs import RewardSpec, reward_functions, score_batch

# ---------------------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------------------


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def resolve_chat_template(setting: bool | None, tokenizer: Any, model_name: str = "") -> bool:
    """Whether to wrap prompts in the chat template.

    An explicit ``True``/``False`` (recipe ``chat_template``, ``--chat-template``) wins. Unset:
    yes when the tokenizer has a template and the model name says it is an instruct/chat
    model (``instruct``, ``-it``, ``chat``), else plain text -- base models are evaluated on
    the raw prompt, as in the paper.
    """
    if setting is not None:
        if setting and not has_chat_template(tokenizer):
            from mutualrl.errors import UsageError

            raise UsageError(
                f"chat_template is on for {model_name or 'a model'}, but its tokenizer has no chat template"
            )
        return setting
    name = model_name.lower()
    instruct = any(tag in name for tag in ("instruct", "-it", "chat"))
    return has_chat_template(tokenizer) and instruct


def prompt_token_ids(tokenizer: Any, prompt: str | list[dict[str, str]], chat_template: bool) -> list[int]:
    """The token ids a policy sees for ``prompt`` (chat-wrapped with a generation prompt, or plain); a list is
    chat messages already (``TaskExample.for_policy``)."""
    if chat_template:
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        text = bounded_render(tokenizer, lambda: tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False), f"tokenizer {tokenizer_name(tokenizer)}")
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt)["input_ids"])


# ---------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------


def score_examples(
    examples: Sequence[TaskExample], completions: Sequence[str], verifier: str | RewardSpec = "default",
    tokenizer: Any = None, chat: bool = False, trainer_state: Any = None,
) -> list[PromptResult]:
    """Score each completion with the verifier of its example's task (``get_task(example.task)``), or, given a
    run's :class:`RewardSpec` with reward functions, with the weighted reward TRL trained on
    (:func:`score_with_funcs`)."""
    from mutualrl.tasks.registry import get_task

    if len(examples) != len(completions):
        raise ValueError(f"{len(examples)} examples but {len(completions)} completions")
    if isinstance(verifier, RewardSpec):
        if verifier.funcs or not verifier.uses_verifier():
            return score_with_funcs(verifier, examples, completions, tokenizer, chat, trainer_state)
        verifier = verifier.verifier
    tasks: dict[str, Task] = {}
    records = []
    for ex, completion in zip(examples, completions, strict=True):
        task = tasks.get(ex.task)
        if task is None:
            task = tasks[ex.task] = get_task(ex.task).with_verifier(verifier)
        records.append(
            PromptResult(
                prompt_id=ex.prompt_id,
                task=ex.task,
                prompt=ex.prompt,
                completion=completion,
                answer=ex.answer,
                extracted=task.extract(completion),
                score=float(task.score(completion, ex.answer)),
            )
        )
    return records


def score_with_funcs(spec: RewardSpec, examples: Sequence[TaskExample], completions: Sequence[str], tokenizer: Any,
                     chat: bool, trainer_state: Any = None) -> list[PromptResult]:
    """Greedy completions scored as in training: prompts and completions in the form TRL gives the reward
    functions for the dataset (:mod:`mutualrl.tasks.reward_form`), every dataset column by name,
    ``completion_ids`` the completion re-tokenized (``tokenizer``, no special tokens), and what else
    ``GRPOTrainer`` passes: ``trainer_state`` (the training's during validation, else a new one), ``log_extra``
    and ``log_metric`` (nothing is logged)."""
    if not examples:
        return []
    rows = [ex.as_row() for ex in examples]
    columns = {key: [row.get(key) for row in rows] for key in dict.fromkeys(k for row in rows for k in row)
               if key != "prompt"}
    if trainer_state is None:
        from transformers import TrainerState

        trainer_state = TrainerState()
    columns.update(trainer_state=trainer_state, log_extra=not_logged, log_metric=not_logged)
    prompts = [ex.for_policy(chat) for ex in examples]
    ids = [tokenizer(c, add_special_tokens=False)["input_ids"] if tokenizer is not None else [] for c in completions]
    funcs = in_dataset_form(reward_functions(spec), examples)  # the dataset's form, as in training
    scores = score_batch(spec, prompts, list(completions), ids, columns, funcs=funcs)
    return [PromptResult(prompt_id=ex.prompt_id, task=ex.task, prompt=ex.prompt, completion=completion,
                         answer=ex.answer, extracted=None, score=score)
            for ex, completion, score in zip(examples, completions, scores, strict=True)]


def not_logged(*args: Any, **kwargs: Any) -> None:
    """``log_extra`` and ``log_metric`` outside training: a reward function may call them; nothing is logged."""


def scoring_label(verifier: str | RewardSpec) -> str:
    """How completions were scored, for results' settings (``default``, ``verifier exact + mod.fn``)."""
    return verifier.describe() if isinstance(verifier, RewardSpec) else verifier


def _model_name(model: Any) -> str:
    config = getattr(model, "config", None)
    return str(getattr(config, "_name_or_path", "") or type(model).__name__)


def evaluate_examples(
    model: Any,
    tokenizer: Any,
    examples: list[TaskExample],
    *,
    max_new_tokens: int,
    batch_size: int,
    chat_template: bool,
    progress: Progress | None = None,
    model_name: str | None = None,
    policy: str | None = None,
    step: int | None = None,
    verifier: str | RewardSpec = "default",
    trainer_state: Any = None,
) -> ModelEvalResult:
    """Greedy reward@1 of ``model`` on ``examples`` (transformers backend).

    One completion per prompt (temperature 0, left padding, stop at EOS), each scored by
    :func:`score_examples` (its example's task verifier, or the reward functions of ``verifier``'s
    :class:`RewardSpec`). ``progress`` is called after every batch with how many prompts it finished.
    """
    start = time.perf_counter()
    prompts = [prompt_token_ids(tokenizer, ex.for_policy(chat_template), chat_template) for ex in examples]
    completions = generate_greedy(
        model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size, progress=progress
    )
    return ModelEvalResult(
        model=model_name or _model_name(model),
        records=score_examples(examples, completions, verifier, tokenizer, chat_template, trainer_state),
        policy=policy,
        step=step,
        settings={
            "backend": "transformers",
            "decoding": "greedy",
            "max_new_tokens": max_new_tokens,
            "batch_size": batch_size,
            "chat_template": chat_template,
            "verifier": scoring_label(verifier),
            "from_model": {"eos_token_ids": eos_token_ids(tokenizer, model),  # all greedy takes from the model
                           "ignored": ignored_generation_settings(model)},
        },
        seconds=time.perf_counter() - start,
    )


# ---------------------------------------------------------------------------------------
# vLLM backend
# ---------------------------------------------------------------------------------------


def vllm_available() -> bool:
    """vllm can generate here: CUDA with vllm installed, or a usable CPU build (never imports vllm)."""
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    if torch.cuda.is_available():
        return True
    from mutualrl.host.vllm_cpu import cpu_blocker

    return cpu_blocker() is None


def greedy_with_llm(llm: Any, tokenizer: Any, prompts: list[list[int]], *, max_new_tokens: int,
                    eos_ids: Sequence[int] | None = None) -> list[str]:
    """Greedy completions (temperature 0) of a running ``vllm.LLM`` from token ids, decoded by ``tokenizer``."""
    from vllm import SamplingParams

    eos = list(eos_ids) if eos_ids is not None else eos_token_ids(tokenizer)
    params = SamplingParams(
        temperature=0.0, n=1, max_tokens=max_new_tokens, stop_token_ids=eos or None, detokenize=False
    )
    outputs = llm.generate([{"prompt_token_ids": ids} for ids in prompts], params, use_tqdm=False)
    pad_id = tokenizer.pad_token_id
    return [decode_completion(tokenizer, o.outputs[0].token_ids, eos, pad_id) for o in outputs]


def generate_greedy_vllm(
    model_path: str,
    tokenizer: Any,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    dtype: str = "auto",
    gpu_memory_utilization: float = 0.85,
    eos_ids: Sequence[int] | None = None,
) -> list[str]:
    """Greedy completions with ``vllm.LLM`` (temperature 0) from the same token ids as the HF path.

    vLLM gets token ids, not text (``skip_tokenizer_init``): prompts are tokenised once, by
    our tokenizer, identically for both backends; completions are decoded by it too. On a CPU
    the KV cache is sized for these prompts (``VLLM_CPU_KVCACHE_SPACE``, unless set).
    """
    import os

    import torch
    from vllm import LLM

    if not torch.cuda.is_available():
        from transformers import AutoConfig

        from mutualrl.host.vllm_cpu import KV_ENV, kv_cache_gib

        from mutualrl.pools.loading import remote_code_refused

        # no config to read: vLLM sizes it from vllm_gpu_memory_utilization; one that names shipped code: refused
        with contextlib.suppress(OSError), remote_code_refused(model_path):
            config = AutoConfig.from_pretrained(model_path, trust_remote_code=False)  # eval runs no shipped code
            longest = max((len(p) for p in prompts), default=0) + max_new_tokens
            max_len = int(getattr(getattr(config, "text_config", None) or config, "max_position_embeddings", longest))
            os.environ.setdefault(KV_ENV, str(kv_cache_gib(config, min(len(prompts), 256), longest, max_len)))
    llm = LLM(
        model=model_path,
        skip_tokenizer_init=True,
        trust_remote_code=False,
        dtype=dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        seed=0,
    )
    try:
        return greedy_with_llm(llm, tokenizer, prompts, max_new_tokens=max_new_tokens, eos_ids=eos_ids)
    finally:
        del llm
        release_vllm()


def release_vllm() -> None:
    """Best-effort release of vLLM's GPU memory between models."""
    with contextlib.suppress(Exception):
        from vllm.distributed.parallel_state import (
            destroy_distributed_environment,
            destroy_model_parallel,
        )

        destroy_model_parallel()
        destroy_distributed_environment()
    gc.collect()
    with contextlib.suppress(Exception):
        import torch

        torch.cuda.empty_cache()


def evaluate_examples_vllm(
    model_path: str,
    tokenizer: Any,
    examples: list[TaskExample],
    *,
    max_new_tokens: int,
    chat_template: bool,
    progress: Progress | None = None,
    model_name: str | None = None,
    policy: str | None = None,
    dtype: str = "auto",
    verifier: str | RewardSpec = "default",
) -> ModelEvalResult:
    """:func:`evaluate_examples` with the vLLM backend (model loaded from ``model_path``)."""
    start = time.perf_counter()
    prompts = [prompt_token_ids(tokenizer, ex.for_policy(chat_template), chat_template) for ex in examples]
    completions = generate_greedy_vllm(model_path, tokenizer, prompts, max_new_tokens=max_new_tokens, dtype=dtype)
    if progress is not None:
        progress(len(examples))
    return vllm_result(model_name or model_path, examples, completions, max_new_tokens=max_new_tokens,
                       chat_template=chat_template, verifier=verifier, policy=policy, step=None, started=start,
                       tokenizer=tokenizer)


def evaluate_examples_llm(
    llm: Any,
    tokenizer: Any,
    examples: list[TaskExample],
    *,
    max_new_tokens: int,
    chat_template: bool,
    model_name: str,
    policy: str | None = None,
    step: int | None = None,
    verifier: str | RewardSpec = "default",
    progress: Progress | None = None,
    chunk: int | None = None,
    trainer_state: Any = None,
) -> ModelEvalResult:
    """:func:`evaluate_examples` with a running vLLM engine (a training run's colocated one); with ``chunk``, the
    prompts go to the engine ``chunk`` at a time and ``progress`` hears how many each one finished."""
    start = time.perf_counter()
    prompts = [prompt_token_ids(tokenizer, ex.for_policy(chat_template), chat_template) for ex in examples]
    size = max(1, chunk or len(prompts) or 1)
    completions: list[str] = []
    for at in range(0, len(prompts), size):
        batch = greedy_with_llm(llm, tokenizer, prompts[at:at + size], max_new_tokens=max_new_tokens)
        completions += batch
        if progress is not None:
            progress(len(batch))
    return vllm_result(model_name, examples, completions, max_new_tokens=max_new_tokens, chat_template=chat_template,
                       verifier=verifier, policy=policy, step=step, started=start, tokenizer=tokenizer,
                       trainer_state=trainer_state)


def vllm_result(model: str, examples: list[TaskExample], completions: list[str], *, max_new_tokens: int,
                chat_template: bool, verifier: str | RewardSpec, policy: str | None, step: int | None,
                started: float, tokenizer: Any = None, trainer_state: Any = None) -> ModelEvalResult:
    """Score vLLM greedy completions into a :class:`ModelEvalResult` (both vLLM evaluation paths)."""
    return ModelEvalResult(
        model=model,
        records=score_examples(examples, completions, verifier, tokenizer, chat_template, trainer_state),
        policy=policy,
        step=step,
        settings={
            "backend": "vllm",
            "decoding": "greedy",
            "max_new_tokens": max_new_tokens,
            "chat_template": chat_template,
            "verifier": scoring_label(verifier),
        },
        seconds=time.perf_counter() - started,
    )

"""A ``trl grpo --config grpo.yaml`` file read as a recipe: ``mutualrl train --pool grpo.yaml``.

TRL's GRPO script takes one flat YAML: its script and model arguments (``model_name_or_path``,
``dataset_name``, ``dataset_config``, ``dataset_train_split``, ``dataset_test_split``,
``reward_funcs``, ``use_peft``, ``lora_r``, ...) beside ``GRPOConfig`` fields. A file like that
(no ``pool`` key) becomes a recipe here: the models of the pool are ``models: [A, B]`` (the one
line to add; default: ``model_name_or_path`` alone), the dataset is task ``dataset`` with the
reward functions, LoRA options become each policy's ``lora``, every other key is a ``grpo`` field
(checked against GRPOConfig as usual); mutualrl's own top-level keys (``regime``, ``validation``,
``batch``, ...) may sit beside them. TRL's ``output_dir`` is the run folder; older TRL's
``max_prompt_length`` is ``task.max_prompt_tokens``.
"""

from __future__ import annotations

import re
from typing import Any

from mutualrl.config.typed import ConfigError

TRL_MARKERS = ("model_name_or_path", "dataset_name", "reward_funcs")
LORA_KEYS = {"lora_r": "r", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout",
             "lora_target_modules": "target_modules", "use_rslora": "use_rslora"}
DATASET_KEYS = ("dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split", "reward_funcs")
DROPPED = ("model_revision", "torch_dtype", "dtype", "trust_remote_code", "attn_implementation", "use_peft",
           "lora_task_type", "lora_modules_to_save", "reward_model_name_or_path")
"""TRL script keys with no per-run meaning here (a policy's ``dtype`` is ``pool.policies.<name>.dtype``)."""
OWN_KEYS = ("pool", "regime", "task", "grpo", "batch", "schedule", "see", "launch", "validation", "description",
            "plugins", "extends")


def is_trl_config(data: dict[str, Any]) -> bool:
    """A flat TRL script config: no ``pool``, and at least one of TRL's script keys."""
    return "pool" not in data and any(key in data for key in TRL_MARKERS)


def policy_name(model: str, taken: set[str]) -> str:
    """A policy name from a model id (``Qwen/Qwen2.5-0.5B`` -> ``qwen2.5-0.5b``), unique in the pool."""
    base = re.sub(r"[^a-z0-9._-]+", "-", model.rstrip("/").split("/")[-1].split(":")[-1].lower()).strip("-._")
    name, n = base or "policy", 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


def from_trl_config(data: dict[str, Any], source: str) -> dict[str, Any]:
    """``data`` unchanged when it is a mutualrl recipe, else the recipe its TRL keys describe."""
    if not isinstance(data, dict) or not is_trl_config(data):
        return data
    flat = dict(data)
    models = flat.pop("models", None) or ([flat["model_name_or_path"]] if flat.get("model_name_or_path") else [])
    flat.pop("model_name_or_path", None)
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models) or not models:
        raise ConfigError(source, "models", "a TRL config read as a recipe needs its pool: models: [model A, "
                          "model B] (hub ids, local folders or builtin:NAME)")
    lora = {LORA_KEYS[k]: flat.pop(k) for k in list(flat) if k in LORA_KEYS} if flat.get("use_peft") else None
    taken: set[str] = set()
    policies = [{"name": policy_name(m, taken), "model": m, **({"lora": lora} if lora is not None else {})}
                for m in models]
    dataset = {k: flat.pop(k) for k in DATASET_KEYS if k in flat}
    task = dict(flat.pop("task", None) or {})
    if dataset.get("dataset_name"):
        config = dataset.get("dataset_config")
        task.setdefault("name", "dataset")
        task.setdefault("source", f"{dataset['dataset_name']}:{config}" if config else dataset["dataset_name"])
    for ours, theirs in (("train_split", "dataset_train_split"), ("eval_split", "dataset_test_split")):
        if dataset.get(theirs):
            task.setdefault(ours, dataset[theirs])
    if dataset.get("reward_funcs"):
        task.setdefault("reward_funcs", list(dataset["reward_funcs"]))
    if "max_prompt_length" in flat:  # older TRL's GRPOConfig field (gone in 1.16): the prompt limit is the task's
        limit = flat.pop("max_prompt_length")
        if limit is not None:  # TRL's null (no truncation): task.max_prompt_tokens keeps its default
            task.setdefault("max_prompt_tokens", limit)
    recipe: dict[str, Any] = {key: flat.pop(key) for key in OWN_KEYS if key in flat}
    if "output_dir" in flat:
        recipe.setdefault("output_dir", flat.pop("output_dir"))
    for key in (*LORA_KEYS, *DROPPED):
        flat.pop(key, None)
    recipe["pool"] = {"name": source.rsplit("/", 1)[-1].rsplit(".", 1)[0] or "trl", "policies": policies,
                      "description": "from a trl grpo config"}
    recipe["task"] = task
    recipe["grpo"] = {**flat, **(recipe.get("grpo") or {})}
    return recipe


PEFT_SCRIPT_KEYS = ("use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_task_type",
                    "peft_config", "use_rslora")
"""What TRL's scripts (``trl grpo --use_peft --lora_r 16``, ModelConfig) call LoRA; not GRPOConfig fields."""
SCRIPT_KEY_HOMES = {"reward_funcs": "task.reward_funcs: [module.function]", "dataset_name": "task.source",
                    "model_name_or_path": "pool.policies.<name>.model",
                    "max_prompt_length": "task.max_prompt_tokens (prompts longer for any policy are left out)"}


def grpo_key_hint(key: str) -> str | None:
    """Where a TRL script option given as ``grpo.<key>`` goes in a recipe (LoRA is per policy), or None."""
    if key in SCRIPT_KEY_HOMES:
        return f"; TRL's script option {key} is {SCRIPT_KEY_HOMES[key]} here"
    if key not in PEFT_SCRIPT_KEYS:
        return None
    field = {"lora_r": "r", "lora_target_modules": "target_modules", "lora_task_type": "task_type"}.get(key, key)
    example = "{}" if key in ("use_peft", "peft_config") else f"{{{field}: ...}}"
    return (f"; LoRA is set per policy: pool.policies.<name>.lora: {example} (peft LoraConfig fields; "
            "`mutualrl pools show NAME --explain` lists every setting)")

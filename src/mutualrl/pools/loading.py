"""Resolve a policy's model and tokenizer names to loadable objects.

- ``builtin:NAME`` models come from :mod:`mutualrl.pools.builtin` (built or fetched on first use, cached).
- Named tokenizers (``qwen3``, ``llama3``, ``mistral-sp``, ...) come from :mod:`mutualrl.assets.tokenizers`.
- Anything else is a local folder or a hub id, loaded with transformers' Auto classes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from mutualrl.assets.hub import unreachable_and_uncached
from mutualrl.errors import DataError, UnknownNameError, UsageError
from mutualrl.pools.adapter_config import ADAPTER_CONFIG, adapter_config_problem
from mutualrl.trust.checkpoint_pickles import load_checkpoints_as_data

BUILTIN_PREFIX = "builtin:"
TRUST_KEY = "grpo.trust_remote_code"


def resolve_model_path(model: str) -> str:
    """A model string -> a local folder or hub id that ``from_pretrained`` accepts."""
    if model.startswith(BUILTIN_PREFIX):
        from mutualrl.pools import builtin

        return str(builtin.ensure_builtin_model(model[len(BUILTIN_PREFIX):]))
    return model


def tokenizer_source(model: str, tokenizer: str | None = None) -> str:
    """What names a policy's tokenizer for :func:`~mutualrl.assets.tokenizers.load_tokenizer`: the named/explicit
    one, else the model's own folder or hub id."""
    return tokenizer if tokenizer is not None else resolve_model_path(model)


def load_tokenizer_for(model: str, tokenizer: str | None = None, trust_remote_code: bool = False) -> Any:
    """The tokenizer of a policy: the named/explicit one, else the model's own (code shipped with it runs only
    with ``trust_remote_code``: the recipe's ``grpo.trust_remote_code``)."""
    from mutualrl.assets.tokenizers import load_tokenizer

    source = tokenizer_source(model, tokenizer)
    with remote_code_refused(source):
        return load_tokenizer(source, trust_remote_code=trust_remote_code)


@contextlib.contextmanager
def remote_code_refused(source: str) -> Iterator[None]:
    """transformers refusing code shipped with a model or tokenizer (``auto_map``): one line naming it and the key."""
    try:
        yield
    except ValueError as err:
        if "trust_remote_code" not in str(err):
            raise
        raise UsageError(f"{source}: its config names code shipped with it (auto_map), and mutualrl runs no such "
                         f"code unless the recipe sets {TRUST_KEY}: true (named in the plan then); mutualrl eval "
                         "never runs it") from None


def remote_code_note(policy: str, model: str, grpo: dict[str, Any]) -> list[str]:
    """The plan's note for a policy whose recipe lets code shipped with its model run."""
    return [f"{policy}: {TRUST_KEY} is on: code shipped with {model} and its tokenizer (auto_map) is run"
            ] if lets_remote_code_run(grpo) else []


def lets_remote_code_run(grpo: dict[str, Any]) -> bool:
    """Whether a policy's merged ``grpo`` fields let code shipped with a model run: ``trust_remote_code``, or the
    same key in ``model_init_kwargs`` (a mapping, or its JSON text), which TRL hands to ``from_pretrained`` for the
    reference model (``beta`` > 0). Any value but false counts: TRL turns the text ``"true"`` into True."""
    kwargs = grpo.get("model_init_kwargs")
    if isinstance(kwargs, str):
        import json

        try:
            kwargs = json.loads(kwargs)
        except ValueError:  # text TRL cannot read either: only its mention counts
            kwargs = {"trust_remote_code": "trust_remote_code" in kwargs}
    nested = kwargs.get("trust_remote_code") if isinstance(kwargs, dict) else None
    return grpo.get("trust_remote_code") is True or nested not in (None, False, "false", "False")


def trusts_remote_code(config: Any) -> list[str]:
    """The policies of ``config`` whose models' shipped code would run (``policy (model)``)."""
    return [f"{p.name} ({p.model})" for p in config.pool.policies if lets_remote_code_run({**config.grpo, **p.grpo})]


def sets_remote_code(overrides: Sequence[str]) -> bool:
    """Whether ``--set`` overrides given now switch ``trust_remote_code`` on (shared or a policy's own)."""
    from mutualrl.config.loader import parse_override

    given = [parse_override(text) for text in overrides if "trust_remote_code" in text.partition("=")[0]]
    return any(keys[-1] == "trust_remote_code" and value is True for keys, value in given)


def refuse_stored_remote_code(config: Any, trusted_now: bool, run_folder: Path) -> None:
    """A run folder's stored config (``--resume``, a machine joining a run) that trusts code shipped with a model:
    a run folder is data, and its ``config.yaml`` names both the model (any folder) and the setting, so it alone
    would choose the code that runs. Only the command running now switches it on (``trusted_now``)."""
    trusting = trusts_remote_code(config)
    if trusting and not trusted_now:
        raise UsageError(f"{run_folder / 'config.yaml'}: {TRUST_KEY} is on for {', '.join(trusting)[:300]}: code "
                         "shipped with those models would run, and a run folder is data that does not switch it on "
                         f"by itself; give --set {TRUST_KEY}=true to this command if you trust that code")


def is_adapter_folder(model: str) -> bool:
    return Path(model, ADAPTER_CONFIG).is_file()


def check_adapter_config(model: str) -> None:
    """A peft adapter folder's ``adapter_config.json`` is what peft can load: else one :class:`DataError` naming the
    file and the field, as ``train --resume`` names such a checkpoint when it passes it over
    (:func:`~mutualrl.pools.adapter_config.adapter_config_problem`)."""
    problem = adapter_config_problem(Path(model)) if is_adapter_folder(model) else None
    if problem is not None:
        raise DataError(f"{problem}; not an adapter that can be loaded (restore the folder, or evaluate another)")


def check_init_adapter(policy: str, init_adapter: str | None, build: str | None = None) -> None:
    """A policy's ``init_adapter`` is a peft adapter folder that can be loaded: else one :class:`UsageError` naming
    the folder and, when the recipe says it (``init_adapter_build``), the command that builds it."""
    if init_adapter is None:
        return
    if not is_adapter_folder(init_adapter):
        how = f"; build it with: {build}" if build else ""
        raise UsageError(f"pool.policies.{policy}.init_adapter: {init_adapter} holds no LoRA adapter (no "
                         f"{ADAPTER_CONFIG}){how}")
    check_adapter_config(init_adapter)


def merge_init_adapter(model_obj: Any, init_adapter: str | None) -> Any:
    """``model_obj`` with the peft adapter folder ``init_adapter`` merged into its weights (itself when None)."""
    if init_adapter is None:
        return model_obj
    check_adapter_config(init_adapter)
    from peft import PeftModel

    return PeftModel.from_pretrained(model_obj, init_adapter).merge_and_unload()


def load_model_or_adapter(model: str, dtype: str = "auto", device: Any = None, base: str | None = None,
                          init_adapter: str | None = None) -> Any:
    """:func:`load_model`, or for a peft adapter folder the adapter on its base model, merged (what a LoRA policy
    trained): ``base`` is the policy's model (the run's config), else the base the adapter names. A policy's
    ``init_adapter`` (its warm start) is merged into the base first, as its training started from it."""
    if not is_adapter_folder(model):
        return merge_init_adapter(load_model(model, dtype, device), init_adapter)
    check_adapter_config(model)
    from peft import PeftModel

    if base is None:
        from mutualrl.run_folder import read_json

        base = read_json(Path(model, ADAPTER_CONFIG)).get("base_model_name_or_path")
        if not base:
            raise UsageError(f"{model}: a LoRA adapter that names no base model; evaluate the run folder instead "
                             "(its config names the policy's model)")
    start = merge_init_adapter(load_model(base, dtype, device), init_adapter)
    return PeftModel.from_pretrained(start, model).merge_and_unload()


def load_model(model: str, dtype: str = "auto", device: Any = None, trust_remote_code: bool = False) -> Any:
    """Load a causal LM for a policy (``dtype`` "auto": bfloat16 on a GPU, float32 on the CPU); code shipped with it
    runs only with ``trust_remote_code`` (the recipe's ``grpo.trust_remote_code``), never on transformers' own
    question."""
    import torch
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(model)
    load_checkpoints_as_data()  # every torch.load of this process from now on: plain tensors only
    if dtype == "auto":
        torch_dtype = torch.bfloat16 if (torch.cuda.is_available() and device != "cpu") else torch.float32
    else:
        torch_dtype = getattr(torch, dtype)
    if not Path(path).exists() and unreachable_and_uncached(path, "config.json"):
        raise UnknownNameError(f"cannot load model {model!r}: not a builtin model (builtin:NAME), not a local "
                               "folder, and the hub cannot be reached from here (offline, or HF_HUB_OFFLINE set) "
                               "and it is not in the local hub cache")
    try:
        with remote_code_refused(model):
            model_obj = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype,
                                                             trust_remote_code=trust_remote_code)
    except OSError as err:
        if not Path(path).exists():
            raise UnknownNameError(
                f"cannot load model {model!r}: not a builtin model, not a local folder, and the hub could not "
                f"provide it ({str(err).splitlines()[0]})"
            ) from None
        raise
    if device is not None:
        model_obj = model_obj.to(device)
    return model_obj


def cached_model_config(model: str) -> tuple[dict[str, Any], str] | None:
    """A model's ``config.json`` (its text part for a multimodal one) and the file it was read from, without loading
    or building the model; None when it is not known here (a hub model not in the local cache, an unbuilt builtin)."""
    import json

    if model.startswith(BUILTIN_PREFIX):
        from mutualrl.pools import builtin, tiny

        name = model[len(BUILTIN_PREFIX):]
        if name in tiny.TINY_MODELS:
            folder = tiny.tiny_model_dir(name) if tiny.is_tiny_model_cached(name) else None
        else:
            folder = Path(builtin.get_builtin(name).ensure()) if builtin.get_builtin(name).is_cached() else None
        config_file = folder / "config.json" if folder is not None else None
    elif Path(model).is_dir():
        config_file = Path(model) / "config.json"
    else:
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(model, "config.json")
        except Exception:  # noqa: BLE001 - not a repo id, no cache: unknown
            cached = None
        config_file = Path(cached) if isinstance(cached, str) else None
    try:
        config = json.loads(config_file.read_text()) if config_file is not None and config_file.is_file() else None
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    text = config.get("text_config")
    return (text if isinstance(text, dict) else config), str(config_file)


PAPER_MODEL_CONTEXTS = {
    "Qwen/Qwen2.5-Math-1.5B": 4096,
    "Qwen/Qwen2.5-1.5B-Instruct": 32768,
    "Qwen/Qwen2.5-Coder-1.5B": 32768,
    "Qwen/Qwen3-1.7B-Base": 32768,
    "Qwen/Qwen3-4B-Base": 32768,
    "meta-llama/Llama-3.2-3B-Instruct": 131072,
    "microsoft/Phi-4-mini-instruct": 131072,
    "ministral/Ministral-3b-instruct": 131072,
}
"""``max_position_embeddings`` in the config.json of each paper model (the hub's, 2025; the shapes beside them:
launch/plan/model_shapes.py), so that a clean node, whose hub cache holds none of them yet, checks the context and caps
vLLM's model length before the weights download: a longer sequence reaches vLLM, which refuses in every rank."""


def model_context(model: str) -> tuple[int, str] | None:
    """(positions the model can attend to, where that was read) without loading or building it: a builtin's recipe,
    the config.json on this machine, else the paper models' table; None when not known here (the worker then finds
    out)."""
    if model.startswith(BUILTIN_PREFIX):
        from mutualrl.pools import tiny

        name = model[len(BUILTIN_PREFIX):]
        if name in tiny.TINY_MODELS:
            return tiny.TINY_MODELS[name].max_positions, f"builtin {name}"
    found = cached_model_config(model)
    if found is None:
        known = PAPER_MODEL_CONTEXTS.get(model)
        return (known, f"{model}'s config.json as published") if known is not None else None
    config, config_file = found
    for key in ("max_position_embeddings", "n_positions"):
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            return value, f"{config_file} {key}"
    return None


"""Resolve a policy's model and tokenizer names to loadable objects.

- ``builtin:NAME`` models come from :mod:`mutualrl.pools.builtin` (built or fetched on first use, cached).
- Named tokenizers (``qwen3``, ``llama3``, ``mistral-sp``, ...) come from :mod:`mutualrl.assets.tokenizers`.
- Anything else is a local folder or a hub id, loaded with transformers' Auto classes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mutualrl.assets.hub import unreachable_and_uncached
from mutualrl.errors import UnknownNameError

BUILTIN_PREFIX = "builtin:"


def resolve_model_path(model: str) -> str:
    """A model string -> a local folder or hub id that ``from_pretrained`` accepts."""
    if model.startswith(BUILTIN_PREFIX):
        from mutualrl.pools import builtin

        return str(builtin.ensure_builtin_model(model[len(BUILTIN_PREFIX):]))
    return model


def load_tokenizer_for(model: str, tokenizer: str | None = None) -> Any:
    """The tokenizer of a policy: the named/explicit one, else the model's own."""
    from mutualrl.assets.tokenizers import load_tokenizer

    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    return load_tokenizer(resolve_model_path(model))


def load_model(model: str, dtype: str = "auto", device: Any = None) -> Any:
    """Load a causal LM for a policy (float32 on CPU unless a dtype is forced)."""
    import torch
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(model)
    if dtype == "auto":
        torch_dtype = torch.bfloat16 if (torch.cuda.is_available() and device != "cpu") else torch.float32
    else:
        torch_dtype = getattr(torch, dtype)
    if not Path(path).exists() and unreachable_and_uncached(path, "config.json"):
        raise UnknownNameError(f"cannot load model {model!r}: not a builtin model (builtin:NAME), not a local "
                               "folder, and the hub cannot be reached from here (offline, or HF_HUB_OFFLINE set) "
                               "and it is not in the local hub cache")
    try:
        model_obj = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
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

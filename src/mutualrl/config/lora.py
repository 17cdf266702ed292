"""A policy's ``lora:`` section: peft's ``LoraConfig`` fields, passed through (every LoRA option works).

``alpha`` and ``dropout`` are accepted as short names of ``lora_alpha`` / ``lora_dropout``.
Unset fields take the paper's LoRA settings (App. "Sequential Peer Distillation": r 16,
alpha 32, dropout 0.05) and adapt every linear layer. An unknown key fails naming it.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

ALIASES = {"alpha": "lora_alpha", "dropout": "lora_dropout"}
DEFAULTS: dict[str, Any] = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.05, "target_modules": "all-linear",
                            "task_type": "CAUSAL_LM"}


def lora_fields() -> set[str]:
    from peft import LoraConfig

    return {f.name for f in dataclasses.fields(LoraConfig) if f.init}


def lora_kwargs(section: dict[str, Any]) -> dict[str, Any]:
    """``LoraConfig(**lora_kwargs(section))``; raises ``KeyError(key, hint)`` for a key LoraConfig lacks."""
    known = lora_fields()
    out = dict(DEFAULTS)
    for key, value in (section or {}).items():
        name = ALIASES.get(key, key)
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known | set(ALIASES)), n=1)
            raise KeyError(key, f"; did you mean {close[0]!r}?" if close else "")
        out[name] = value
    return out

"""A peft adapter folder's ``adapter_config.json``, checked before peft reads it: ``train --resume`` passes over a
checkpoint whose config is damaged (naming it), ``eval`` and ``distill`` refuse it in one line."""

from __future__ import annotations

import json
from pathlib import Path

from mutualrl.errors import RunFolderError
from mutualrl.run_folder import read_json

#: What marks a peft adapter folder (a LoRA run's final/ and checkpoint-N/): weights to put on a base model.
ADAPTER_CONFIG = "adapter_config.json"


#: Fields of ``adapter_config.json`` that hold text (a path or a hub name) or null, besides ``peft_type``.
ADAPTER_TEXT_FIELDS = ("base_model_name_or_path", "revision", "task_type")


def adapter_config_problem(folder: Path) -> str | None:
    """What is wrong with ``folder``'s peft ``adapter_config.json`` (None: no such file, or nothing): not JSON, not
    an object, a field of another type (a number where the base model's path belongs), a ``peft_type`` the
    installed peft does not know. Each was a traceback from peft's loader halfway through the models."""
    path = folder / ADAPTER_CONFIG
    try:
        config = read_json(path)  # bounded, and a FIFO is named rather than waited on
    except FileNotFoundError:
        return None
    except RunFolderError as err:
        return str(err)
    for name in ADAPTER_TEXT_FIELDS:
        value = config.get(name)
        if value is not None and not isinstance(value, str):
            return f"{path}: {name}: a JSON {type(value).__name__} where text (a path or a hub name) belongs"
    peft_type = config.get("peft_type")
    if not isinstance(peft_type, str):
        return f"{path}: peft_type: {json.dumps(peft_type)[:80]}, where the adapter's kind (e.g. \"LORA\") belongs"
    if peft_type != "LORA":  # what every LoRA run saves: known without importing peft (seconds)
        from peft.utils.peft_types import PeftType

        known = [kind.value for kind in PeftType]
        if peft_type not in known:
            return (f"{path}: peft_type: {peft_type[:80]!r} is no kind of adapter peft knows "
                    f"({', '.join(known[:12])}, ...)")
    return None

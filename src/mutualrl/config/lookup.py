"""A setting's value in a plain config mapping (a recipe as YAML gives it, a run's ``config.yaml``) by its dotted key."""

from __future__ import annotations

from typing import Any

MISSING = object()
"""What :func:`value_at` gives for a key the mapping does not hold (``None`` is a value: a setting left unset)."""


def value_at(data: Any, dotted: str) -> Any:
    """The value at ``dotted`` (``grpo.max_steps``, ``pool.policies.tiny-bpe.model``: a list item by its ``name``),
    or :data:`MISSING`."""
    node = data
    for key in dotted.split("."):
        if isinstance(node, list):
            node = next((item for item in node if isinstance(item, dict) and item.get("name") == key), MISSING)
        elif isinstance(node, dict):
            node = node.get(key, MISSING)
        else:
            return MISSING
        if node is MISSING:
            return MISSING
    return node

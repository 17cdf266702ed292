"""Provenance of SEE records: who produced them, with what software, where and when.

The paper's record carries a ``meta`` field recording provenance (Sec. "Dataflow in One
Training Loop", SEE paragraph). We store it once per shard, in its manifest,
not per row.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import socket
import time
from typing import Any

#: Packages whose versions are recorded with every shard.
TRACKED_PACKAGES = ("mutualrl", "trl", "transformers", "torch", "pyarrow")


@functools.cache
def package_versions() -> dict[str, str | None]:
    """Installed versions of :data:`TRACKED_PACKAGES` (``None`` where not installed), without importing them."""
    versions: dict[str, str | None] = {}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    if versions.get("mutualrl") is None:
        from mutualrl.release import VERSION

        versions["mutualrl"] = VERSION
    return versions


def collect_provenance(
    model: str | None = None, tokenizer: str | None = None, **extra: Any
) -> dict[str, Any]:
    """A provenance record: model and tokenizer names, package versions, host, pid and unix time.

    ``extra`` keys (JSON-serialisable) are kept as given, e.g. ``regime=<name>``.
    """
    return {
        "model": model,
        "tokenizer": tokenizer,
        "versions": dict(package_versions()),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "time": time.time(),
        **extra,
    }


def refresh_provenance(base: dict[str, Any] | None) -> dict[str, Any]:
    """``base`` (user-given fields such as model/tokenizer) completed with current versions, host, pid and time."""
    base = dict(base or {})
    fresh = collect_provenance(model=base.pop("model", None), tokenizer=base.pop("tokenizer", None))
    for key in ("versions", "hostname", "pid", "time"):
        base.pop(key, None)
    fresh.update(base)
    return fresh

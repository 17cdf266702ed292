"""Is the Hugging Face hub reachable from here? One short probe per process.

Compute nodes of most clusters have no internet: every place that resolves a hub id asks
this first, so a name that only the hub could provide fails in seconds, not after the hub
client's retries (about a minute).
"""

from __future__ import annotations

import functools
import os
import socket

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def hub_reachable(timeout_s: float = 2.0) -> bool:
    """Whether the Hugging Face hub can be reached (respects ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``)."""
    for var in OFFLINE_VARIABLES:
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = endpoint.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
    return _can_connect(host, timeout_s)


@functools.lru_cache(maxsize=8)
def _can_connect(host: str, timeout_s: float) -> bool:
    # Probed once per process: every later look-up would otherwise pay the timeout again.
    try:
        with socket.create_connection((host, 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def unreachable_and_uncached(repo_id: str, *filenames: str) -> bool:
    """True when only the hub could provide ``repo_id`` and it cannot be reached: fail now, not after retries.

    A hub id with any of ``filenames`` in the local hub cache loads offline; without the hub, transformers'
    own look-ups (e.g. for an ``adapter_config.json``) retry for about a minute whatever
    ``local_files_only`` says, so callers skip ``from_pretrained`` entirely when this is True.
    """
    if hub_reachable():
        return False
    from huggingface_hub import try_to_load_from_cache

    try:
        return not any(isinstance(try_to_load_from_cache(repo_id, name), str) for name in filenames)
    except ValueError:  # not even a valid repo id
        return True

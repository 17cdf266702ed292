"""Atomic file writes: a reader sees the old content or the new one, never half a file.

The launcher, the workers and the CLI read each other's files while they are being
rewritten (status, metrics, configs, eval results), so every small text or JSON file goes
through here: a temporary file in the same folder (the rename is then atomic), fsynced,
renamed over the final name. SEE shards keep their own writer (``see/files.py``): they
hash while writing and name their temporaries so that ``see inspect`` can report them.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Replace ``path`` with ``text`` (UTF-8) in one step; the folder is created if needed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        # O_EXCL: never write through someone else's file; mode 0o666 lets the umask decide, as open() does.
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, data: Any, **dumps: Any) -> Path:
    """``data`` as JSON, atomically; by default one-space indent and ``str()`` for what JSON lacks (paths)."""
    return write_text_atomic(path, json.dumps(data, **{"indent": 1, "default": str, **dumps}))

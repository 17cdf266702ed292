"""Reading a run's record of its user code and data (``RUN/inputs.json``, written by
:mod:`mutualrl.launch.rundir.inputs` as the run starts): every entry's type checked where it is read, so that report,
plot, eval and ``--resume`` name a damaged entry in one line instead of tripping over it later."""

from __future__ import annotations

import re
from typing import Any

from mutualrl.errors import RunFolderError
from mutualrl.run_folder import RunPaths, read_json

MAX_ENTRIES = 1000
SHA256_RE = re.compile(r"[0-9a-f]{64}")


def recorded_inputs(paths: RunPaths) -> dict[str, Any] | None:
    """The run's record; None for a run from before records. A damaged one (not JSON, or an entry of the wrong
    type: a list where ``code`` belongs, a number where a module's file or a digest belongs) is one
    :class:`RunFolderError` naming the file and the field, so that no reader of it trips over the entry later."""
    try:
        record = read_json(paths.inputs)
    except FileNotFoundError:
        return None
    for name in ("code", "data"):
        value = record.get(name)
        if not isinstance(value, dict):
            raise RunFolderError(f"{paths.inputs}: {name}: {json_kind(value)} where an object belongs (damaged)")
        if len(value) > MAX_ENTRIES:  # a run names a handful; more was written to make every reader slow
            raise RunFolderError(f"{paths.inputs}: {name}: {len(value):,} entries, more than {MAX_ENTRIES:,} (damaged)")
    for module, entry in record["code"].items():
        problem = code_entry_problem(entry)
        if problem:
            raise RunFolderError(f"{paths.inputs}: code[{module[:200]!r}]{problem} (damaged)")
    for name, digest in record["data"].items():
        if not is_digest(digest):
            raise RunFolderError(f"{paths.inputs}: data[{name[:200]!r}]: {json_kind(digest)} where a sha256 "
                                 "(64 hex digits) belongs (damaged)")
    return record


def code_entry_problem(entry: Any) -> str:
    """What is wrong with one ``code`` entry (empty: nothing): null (the module was not found as the run started)
    or ``{"file": text, "sha256": digest}``."""
    if entry is None:
        return ""
    if not isinstance(entry, dict):
        return f": {json_kind(entry)} where an object or null belongs"
    if not isinstance(entry.get("file"), str):
        return f".file: {json_kind(entry.get('file'))} where a path belongs"
    if not is_digest(entry.get("sha256")):
        return f".sha256: {json_kind(entry.get('sha256'))} where a sha256 (64 hex digits) belongs"
    return ""


def is_digest(value: Any) -> bool:
    return isinstance(value, str) and SHA256_RE.fullmatch(value) is not None


def json_kind(value: Any) -> str:
    """A JSON value as a message names it: its JSON type and (cut short) the value."""
    kinds = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "text",
             list: "a list", dict: "an object"}
    kind = kinds.get(type(value), type(value).__name__)
    if value is None or isinstance(value, (list, dict)):
        return kind
    return f"{kind} {value[:80]!r}" if isinstance(value, str) else f"{kind} {str(value).lower()[:80]}"

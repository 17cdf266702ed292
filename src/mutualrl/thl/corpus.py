"""The built-in THL check corpus and ``{"text": ...}`` JSONL loading.

``corpus.jsonl`` (package data) holds a few dozen short texts chosen to hit THL's hard
cases: English prose, math with LaTeX, code (indentation, tabs), lists and whitespace
runs, CRLF and no-break spaces, emoji (multi-byte, ZWJ sequences), CJK, Hangul, Thai and
other scripts, and mixed Western/CJK text.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from mutualrl.errors import DataError


def builtin_corpus() -> list[str]:
    """The built-in corpus texts, in file order."""
    raw = resources.files("mutualrl.thl").joinpath("corpus.jsonl").read_text(encoding="utf-8")
    return _parse_jsonl(raw, "built-in THL corpus")


def load_texts(path: str | Path) -> list[str]:
    """Texts from a JSONL file with one ``{"text": ...}`` object per line (blank lines skipped)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"texts file {p} does not exist")
    try:
        raw = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"texts file {p} is not UTF-8: {err}") from None
    texts = _parse_jsonl(raw, str(p))
    if not texts:
        raise DataError(f"texts file {p} has no rows")
    return texts


def _parse_jsonl(raw: str, where: str) -> list[str]:
    texts = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{where}, line {lineno}: not valid JSON ({err.msg})") from None
        if not isinstance(row, dict) or "text" not in row:
            raise DataError(f"{where}, line {lineno}: expected an object with a \"text\" field")
        if not isinstance(row["text"], str):
            raise DataError(f"{where}, line {lineno}: field \"text\" is {type(row['text']).__name__}, not a string")
        texts.append(row["text"])
    return texts

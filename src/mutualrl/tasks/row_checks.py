"""A dataset's rows checked before anything tokenizes them: one line naming the file, the row and the column.

A user's data reaches tokenizers, the prompt-length memo, JSON files and reward functions. What would break
them later, deep in a library, is refused here instead: an empty prompt, text that is not valid Unicode (a lone
surrogate such as ``"\\ud800"``, which JSON can spell), a text longer than ``task.max_prompt_chars`` (the
launcher's length filter tokenizes every prompt: a 50 MB prompt took over 6 GB), chat content in parts that are
not text, and a column whose rows hold values of different types.
"""

from __future__ import annotations

from typing import Any

from mutualrl.errors import DataError

DEFAULT_MAX_PROMPT_CHARS = 200_000
"""Longest text a row may hold (characters): tokenizing one takes about 100 MB and a few seconds."""
MAX_NESTING = 32
"""Deepest nesting of lists and objects a cell may have (a deeper one is damaged or hostile)."""


def where(origin: str, index: int, column: str) -> str:
    return f"{origin}: row {index}, column {column!r}"


def check_text(text: str, place: str, max_chars: int) -> str:
    """``text`` when it is within ``max_chars`` and valid Unicode; else a :class:`DataError` at ``place``."""
    if len(text) > max_chars:
        raise DataError(f"{place}: {len(text):,} characters, more than task.max_prompt_chars={max_chars:,}; "
                        "shorten the row or raise task.max_prompt_chars")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise DataError(f"{place}: not valid Unicode at character {err.start} ({text[err.start]!r}, a lone "
                        "surrogate); fix the data") from None
    return text


def check_cell(value: Any, place: str, max_chars: int, depth: int = 0) -> None:
    """Every text inside a cell (lists and objects too) is bounded and valid Unicode."""
    if depth > MAX_NESTING:
        raise DataError(f"{place}: nested more than {MAX_NESTING} levels deep")
    if isinstance(value, str):
        check_text(value, place, max_chars)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(str(key), place, max_chars)
            check_cell(item, place, max_chars, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            check_cell(item, place, max_chars, depth + 1)


def content_text(content: Any, place: str) -> str:
    """A chat message's content as text: text itself, or content parts (``[{"type": "text", "text": ...}]``, the
    OpenAI and TRL form) joined as chat templates join them; a part that is not text is refused by its type."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise DataError(f"{place}: a message's content must be text or a list of content parts, got "
                        f"{type(content).__name__}")
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text" or not isinstance(part.get("text"), str):
            name = kind if isinstance(kind, str) else type(part).__name__
            raise DataError(f"{place}: content part of type {name[:40]!r} is not text; mutualrl trains on text "
                            "only (parts of type 'text' with a 'text' string)")
        texts.append(part["text"])
    return "".join(texts)


def chat_messages(prompt: list[Any], place: str, max_chars: int) -> list[dict[str, str]]:
    """A conversational prompt's messages with text content, each checked."""
    messages = []
    for number, message in enumerate(prompt):
        if not isinstance(message, dict) or "content" not in message:
            raise DataError(f"{place}: message {number} is not a chat message ({{'role': ..., 'content': ...}})")
        role = message.get("role", "user")
        if not isinstance(role, str) or not role:
            raise DataError(f"{place}: message {number} has a role that is not text: {type(role).__name__}")
        text = check_text(content_text(message["content"], place), place, max_chars)
        messages.append({"role": check_text(role, place, 100), "content": text})
    return messages


def prompt_text(prompt: Any, place: str, max_chars: int) -> tuple[str, list[dict[str, str]] | None]:
    """A row's ``prompt`` as text and, for a chat-message list, the messages; empty or oversized text is refused.

    A policy without a chat template reads the messages' contents joined by blank lines (docs/tasks.md).
    """
    if isinstance(prompt, str):
        text, messages = check_text(prompt, place, max_chars), None
    elif isinstance(prompt, list) and prompt:
        messages = chat_messages(prompt, place, max_chars)
        text = "\n\n".join(m["content"] for m in messages)
    else:
        raise DataError(f"{place}: must be text or a list of chat messages ({{'role': ..., 'content': ...}}), "
                        f"got {type(prompt).__name__}{' (empty)' if isinstance(prompt, list) else ''}")
    if not text.strip():
        raise DataError(f"{place}: empty prompt; remove the row or give it a prompt")
    check_text(text, place, max_chars)
    return text, messages


def kind(value: Any) -> str:
    """A value's type as a column sees it (integers and floats are both numbers)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "text", list: "list", tuple: "list", dict: "object"}.get(type(value), type(value).__name__)


class ColumnTypes:
    """The type of each column, from the first row that holds a value there (None is a missing value)."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.first: dict[str, tuple[str, int]] = {}

    def check(self, row: dict[str, Any], index: int) -> None:
        for column, value in row.items():
            if value is None:
                continue
            seen = self.first.setdefault(str(column), (kind(value), index))
            if seen[0] != kind(value):
                raise DataError(f"{where(self.origin, index, str(column))}: holds {kind(value)}, but row {seen[1]} "
                                f"holds {seen[0]}; a column holds one type")


def check_carried_columns(rows: list[dict[str, Any]], origin: str) -> None:
    """Every column can ride to the trainer: the rows travel as JSON (``RUN/data/*.jsonl``) and then as an Arrow
    table (``datasets.Dataset.from_list``), which holds one type per column, inside lists and objects too. A value
    JSON cannot spell (bytes, a date) or a column Arrow cannot hold (a list mixing text and numbers, a Parquet map
    column, lists of different element types) is one line naming the file, the first row that cannot be carried and
    the column, at the dry run and before any worker starts (it was ~40 lines of ArrowTypeError in every worker)."""
    columns = dict.fromkeys(str(column) for row in rows for column in row if column != "prompt")
    for column in columns:
        values = [row.get(column) for row in rows]
        if not any(isinstance(value, (list, tuple, dict)) for value in values):
            continue
        carried = [json_value(value, where(origin, index, column)) for index, value in enumerate(values)]
        if not arrow_holds(carried):
            bad = first_unheld(carried)
            raise DataError(f"{where(origin, bad, column)}: {short_value(values[bad])} cannot share a column with the "
                            "rows before it (a column holds one type, inside lists and objects too: the datasets "
                            "library carries the rows to the trainer); give every row the same shape, or store the "
                            "value as JSON text")


def json_value(value: Any, place: str) -> Any:
    """``value`` as the worker reads it back from the run's JSONL copy."""
    import json

    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as err:
        raise DataError(f"{place}: {short_value(value)} cannot be written as JSON ({err}); convert it to text, a "
                        "number, a list or an object") from None


def arrow_holds(values: list[Any]) -> bool:
    import pyarrow as pa

    try:
        pa.array(values)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return False
    return True


def first_unheld(values: list[Any]) -> int:
    """The first index whose prefix Arrow cannot hold (a prefix that fails stays failing as it grows)."""
    low, high = 0, len(values) - 1  # values[:high + 1] fails
    while low < high:
        middle = (low + high) // 2
        if arrow_holds(values[:middle + 1]):
            low = middle + 1
        else:
            high = middle
    return low


def short_value(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= limit else text[:limit] + '...'}"

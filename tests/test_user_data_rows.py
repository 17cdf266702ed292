"""A user's dataset rows are checked before anything tokenizes them: one line naming file, row and column."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mutualrl.errors import DataError
from mutualrl.tasks.registry import get_task, task_from_config


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def load(source: Path, max_chars: int | None = None):
    task = get_task("dataset")
    task.configure("train", "test", 0.5, 0)
    if max_chars is not None:
        task.max_prompt_chars = max_chars
    return task.load("train", str(source))


GOOD = {"prompt": "1+1=", "answer": "2"}


@pytest.mark.parametrize("bad, needle", [
    ({"prompt": "", "answer": "2"}, "row 1, column 'prompt': empty prompt"),
    ({"prompt": "   \n", "answer": "2"}, "row 1, column 'prompt': empty prompt"),
    ({"prompt": [{"role": "user", "content": ""}], "answer": "2"}, "row 1, column 'prompt': empty prompt"),
    ({"prompt": [], "answer": "2"}, r"row 1, column 'prompt': must be text .* \(empty\)"),
    ({"prompt": "x\ud800y", "answer": "2"}, "row 1, column 'prompt': not valid Unicode at character 1"),
    ({"prompt": "1+2=", "answer": "\udfff"}, "row 1, column 'answer': not valid Unicode"),
    ({"prompt": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], "answer": "2"},
     "row 1, column 'prompt': content part of type 'image_url' is not text"),
    ({"prompt": "1+2=", "answer": 3}, "row 1, column 'answer': holds number, but row 0 holds text"),
    ({"prompt": [{"role": 7, "content": "hi"}], "answer": "2"}, "role that is not text"),
])
def test_a_bad_row_is_one_line_naming_file_row_and_column(tmp_path: Path, bad: dict, needle: str) -> None:
    source = write_rows(tmp_path / "rows.jsonl", [GOOD, bad, GOOD])
    with pytest.raises(DataError, match=needle) as err:
        load(source)
    assert str(source) in str(err.value) and "\n" not in str(err.value)


def test_chat_content_parts_are_joined_text_not_their_repr(tmp_path: Path) -> None:
    parts = [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]
    chat = {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": parts}],
            "answer": "4"}
    source = write_rows(tmp_path / "rows.jsonl", [chat, chat | {"answer": "5"}])
    example = load(source)[0]
    assert example.for_policy(False) == "Be brief.\n\nWhat is 2+2?"
    assert example.for_policy(True)[1] == {"role": "user", "content": "What is 2+2?"}
    assert "'type'" not in example.prompt


def test_a_huge_prompt_is_refused_with_the_numbers_before_tokenization(tmp_path: Path) -> None:
    huge = {"prompt": "x" * 50_000_000, "answer": "1"}
    source = write_rows(tmp_path / "rows.jsonl", [GOOD, huge])
    start = time.perf_counter()
    with pytest.raises(DataError, match=r"row 1, column 'prompt': 50,000,000 characters, more than "
                                        r"task.max_prompt_chars=200,000"):
        load(source)
    assert time.perf_counter() - start < 5
    assert len(load(write_rows(tmp_path / "ok.jsonl", [GOOD, {"prompt": "y" * 300, "answer": "1"}]), 300)) == 1
    with pytest.raises(DataError, match="301 characters, more than task.max_prompt_chars=300"):
        load(write_rows(tmp_path / "no.jsonl", [GOOD, {"prompt": "y" * 301, "answer": "1"}]), 300)


def test_the_bound_is_the_recipes_and_holds_for_a_builtin_tasks_local_file(tmp_path: Path) -> None:
    from mutualrl.config.schema import TaskConfig
    from mutualrl.tasks.row_checks import DEFAULT_MAX_PROMPT_CHARS

    assert TaskConfig().max_prompt_chars == DEFAULT_MAX_PROMPT_CHARS
    task = task_from_config(TaskConfig(name="gsm8k", max_prompt_chars=100))
    assert task.max_prompt_chars == 100
    source = write_rows(tmp_path / "test.jsonl", [{"question": "q" * 200, "answer": "#### 3"}])
    with pytest.raises(DataError, match=r"row 0, column 'prompt': \d+ characters, more than task.max_prompt_chars=100"):
        task.load("test", str(source))
    surrogate = write_rows(tmp_path / "s" / "test.jsonl", [{"question": "a\ud800", "answer": "#### 3"}])
    with pytest.raises(DataError, match="column 'prompt': not valid Unicode"):
        get_task("gsm8k").load("test", str(surrogate))


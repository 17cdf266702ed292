"""Answer-line QA variants (tasks/answer_line.py): prompt, verifier, fixed held-out partition."""

from __future__ import annotations

import warnings

import pytest

from mutualrl.tasks.answer_line import ANSWER_SUFFIX, held_out, line_letter, line_yes_no
from mutualrl.tasks.dataset_task import BOXED_INSTRUCTION
from mutualrl.tasks.registry import get_task, resolve_suite


pytestmark = pytest.mark.usefixtures("offline_hub")


def test_prompt_drops_boxed_instruction_and_ends_with_answer_line() -> None:
    base = get_task("arc-easy").load("test", "offline", 3)
    line = get_task("arc-easy-line").load("test", "offline", 3)
    for b, ex in zip(base, line, strict=True):
        assert BOXED_INSTRUCTION in b.prompt and BOXED_INSTRUCTION not in ex.prompt
        assert ex.prompt.endswith("\nD. " + b.prompt.rsplit("\nD. ", 1)[1] + ANSWER_SUFFIX)
        assert ex.answer == b.answer and ex.task == "arc-easy-line"
        assert ex.prompt_id == b.prompt_id.replace("arc-easy/", "arc-easy-line/", 1)
    assert resolve_suite("qa-line")[0] == "arc-line"


@pytest.mark.parametrize(("completion", "letter"), [
    (" B", "B"), (" (B) because", "B"), ("B. Most ecosystems", "B"), ("The correct answer is B.", "B"),
    ("**Answer: B**", "B"), (" Option B", "B"), ("Answer: C", "C"), ("the answer is (D)", "D"),
    (" a person walks", None), ("", None), (" Which of these", None), ("\n\nA. Sunlight", "A"),
])
def test_line_letter(completion: str, letter: str | None) -> None:
    assert line_letter(completion, 4) == letter


def test_line_letter_out_of_range_and_scores() -> None:
    assert line_letter(" E", 4) is None
    task = get_task("arc-line")
    assert task.score(" B\nQuestion: next", "B") == 1.0
    assert task.score(" C", "B") == 0.0
    assert task.extract(" (C)") == "C"


@pytest.mark.parametrize(("completion", "answer"), [
    (" Yes", "Yes"), ("Yes.", "Yes"), (" No, because", "No"), ("The answer is No", "No"), (" Yesterday", None),
    (" Maybe", None), ("\nYes\nAnswer:", "Yes"),
])
def test_line_yes_no(completion: str, answer: str | None) -> None:
    assert line_yes_no(completion) == answer


def test_boolq_line_scores_yes_no() -> None:
    task = get_task("boolq-line")
    assert task.score(" Yes\nAnswer: Yes", "Yes") == 1.0
    assert task.score(" No", "Yes") == 0.0
    assert task.score(" B", "Yes") == 0.0


def test_testless_tasks_hold_out_a_fixed_quarter() -> None:
    task = get_task("boolq-line")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train, test = task.load("train", "offline"), task.load("test", "offline")
        everything = get_task("boolq").load("validation", "offline")
    keys = lambda rows: {r.prompt_id.rsplit("/", 1)[1] for r in rows}  # noqa: E731
    assert not keys(train) & keys(test)
    assert keys(train) | keys(test) == keys(everything)
    assert 0.2 < len(test) / len(everything) < 0.3
    # The rule is a fixed function of the base prompt id, computed here by hand for two rows.
    assert held_out("boolq/validation/00000") == (int(__import__("hashlib").sha256(
        b"boolq/validation/00000").hexdigest()[:8], 16) % 4 == 0)
    assert all(r.prompt_id.startswith("boolq-line/test/") for r in test)
    assert task.load("test", "offline", 5) == test[:5]


def test_tasks_with_a_test_split_keep_it() -> None:
    line = get_task("arc-easy-line")
    assert not line.partitioned
    assert len(line.load("test", "offline")) == len(get_task("arc-easy").load("test", "offline"))

"""Answer-line variants of the QA tasks: the closest format small models can follow.

The paper's templates ask for a chain of thought and the answer in ``\\boxed{}``
(:mod:`mutualrl.tasks.qa`). Models of 135M-270M parameters never write ``\\boxed{}``
(docs/pools.md, "Real pretrained models on a paper benchmark"), so every reward under the
paper's format is 0 and no regime has a signal. A ``<task>-line`` variant asks the same
question with the same options, drops the boxed instruction, and ends the prompt with an
answer line::

    <question>\\n\\nWhich option (A-D) is the correct answer?\\n\\nA. ...\\nB. ...\\nAnswer:

Its verifier reads the option the completion *starts* with (``" B"``, ``" (B)"``,
``"B. text"``, ``"The correct answer is B"``, ``"Option B"``); a completion that names no
option first scores 0. BoolQ's reads a leading ``Yes``/``No``. Same gold answers as the base
task, prompt ids under the variant's own name (``arc-easy-line/test/...``).

Held-out split. BoolQ, PIQA, HellaSwag and Social IQa publish no test labels: the base task's
``test`` is its validation set, and offline its ``train`` is too (there is nothing else). Training
on the prompts one tests on would measure memorisation, so for these the variant's ``train``
and ``test`` are a fixed partition of the validation rows, whatever the source: a row is ``test`` when the first 8
hex digits of the SHA-256 of its base prompt id are 0 mod 4 (about a quarter), else ``train``.
The rule uses no seed, so every run, regime and machine holds out the same prompts.
"""

from __future__ import annotations

import hashlib
import re
from mutualrl.tasks.base import Task, TaskExample
from mutualrl.tasks.dataset_task import BOXED_INSTRUCTION
from mutualrl.tasks.verifiers import choice_letter, yes_no

ANSWER_SUFFIX = "\nAnswer:"
"""Appended to every answer-line prompt: a base model continues it with the answer."""

# "The correct answer is B", "Answer: B", "the answer is option (B)" -> the part after the lead-in.
_LEAD_IN = re.compile(
    r"^\s*(?:\*\*)?(?:the\s+)?(?:correct\s+|best\s+|right\s+)?(?:answer|option|choice|solution)"
    r"(?:\s+is)?\s*(?:option|choice)?\s*[:\-]?\s*",
    re.IGNORECASE,
)


def leading_answer(completion: str) -> str:
    """The completion's first answer-bearing words: lead-ins and markdown bold removed."""
    text = completion.strip().lstrip("*").strip()
    text = _LEAD_IN.sub("", text, count=1)
    return text.strip().lstrip("*").strip()


def line_letter(completion: str, n_options: int | None) -> str | None:
    """The option letter an answer-line completion starts with, or None."""
    head = leading_answer(completion)
    first = re.match(r"^[(\[]?\s*([A-Za-z])\s*[)\]]?(?=$|[\s.:,)\-*])", head)
    if not first:
        return None
    letter = first.group(1)
    if letter.islower():  # "a person ..." is prose, not option A
        return None
    return choice_letter(letter, n_options)


def line_yes_no(completion: str) -> str | None:
    """``Yes``/``No`` when the completion starts with it (``" Yes."``, ``"No, because ..."``)."""
    head = leading_answer(completion)
    word = re.match(r"^([A-Za-z]+)", head)
    return yes_no(word.group(1)) if word else None


def held_out(base_prompt_id: str) -> bool:
    """Whether a validation row of a test-less task is in the variant's fixed ``test`` quarter."""
    return int(hashlib.sha256(base_prompt_id.encode()).hexdigest()[:8], 16) % 4 == 0


class AnswerLineTask(Task):
    """``<base>-line``: a QA task asked with an answer line instead of ``\\boxed{}``."""

    def __init__(self, base: Task) -> None:
        self.base = base
        self.name = f"{base.name}-line"
        self.splits = base.splits
        self.default_eval_split = base.default_eval_split
        self.train_rows = base.train_rows
        self.completion_tokens = 8  # an answer line: "B", "The correct answer is B." (recipes/pools/smol-qa.yaml)

    def rewrite(self, example: TaskExample, split: str | None = None) -> TaskExample:
        """The answer-line prompt; ``split`` renames the id's split part (a partitioned validation row)."""
        prompt = example.prompt.replace("\n" + BOXED_INSTRUCTION, "").replace(BOXED_INSTRUCTION, "")
        _, base_split, key = example.prompt_id.split("/", 2)
        prompt_id = f"{self.name}/{split or base_split}/{key}"
        return TaskExample(prompt_id=prompt_id, prompt=prompt.rstrip() + ANSWER_SUFFIX, answer=example.answer,
                           task=self.name, meta=dict(example.meta))

    @property
    def partitioned(self) -> bool:
        """Train and test come from the same rows of the base task: hold out a fixed quarter."""
        offline = getattr(self.base, "offline", {})
        return bool(offline) and offline.get("train") == offline.get("test")

    def load(self, split: str, source: str | None = None, limit: int | None = None) -> list[TaskExample]:
        if not (self.partitioned and split in ("train", "test")):
            return [self.rewrite(ex) for ex in self.base.load(split, source, limit)]
        rows = [ex for ex in self.base.load("validation", source) if held_out(ex.prompt_id) == (split == "test")]
        rows = rows if limit is None else rows[:limit]
        return [self.rewrite(ex, split) for ex in rows]

    def answer_text(self, answer: str) -> str:
        """After ``Answer:``: the option letter (BoolQ: ``Yes``/``No``)."""
        return f" {yes_no(answer) if self.base.name == 'boolq' else str(answer).strip().upper()}"

    def extract(self, completion: str) -> str | None:
        if self.base.name == "boolq":
            return line_yes_no(completion)
        return line_letter(completion, None)

    def score(self, completion: str, answer: str) -> float:
        if self.base.name == "boolq":
            return float(line_yes_no(completion) == yes_no(answer))
        return float(line_letter(completion, None) == str(answer).strip().upper())

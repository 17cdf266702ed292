"""Prompts for a run: loaded once by the parent, filtered jointly, shared by every policy.

Every policy must see the same prompt ids in the same order (docs/launch.md, "Batch sizes"). The parent
process loads the task's splits once, drops every prompt that is too long for ANY policy's tokenizer (paper: "examples whose tokenized prompts exceed
1024 tokens are dropped"), and writes the survivors to ``RUN/data/{train,eval}.jsonl``.
Each policy process reads those files; with the same seed and generation batch size,
TRL's ``RepeatSampler`` then yields identical prompt ids at every step.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_text_atomic
from mutualrl.errors import DataError
from mutualrl.tasks.base import TaskExample

TRAIN_FILE = "train.jsonl"
EVAL_FILE = "eval.jsonl"


def chat_messages(prompt: str | list[dict[str, str]]) -> list[dict[str, str]]:
    """Chat messages as given (a dataset's conversational prompt), or one user turn around text."""
    return prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]


def uses_chat_template(tokenizer: Any, chat_template: bool | None) -> bool:
    """Whether a policy's prompts are wrapped in its chat template: only where the recipe says ``chat_template: true``
    (the tokenizer must have one); unset or false, every model gets plain text (the paper's MATH setup)."""
    return chat_template_choice(chat_template, bool(getattr(tokenizer, "chat_template", None)))


def chat_template_choice(chat_template: bool | None, has_template: bool) -> bool:
    """The recipe's ``chat_template`` against whether the tokenizer has one: asking for a missing template is a
    ``DataError``; unset means plain text."""
    if chat_template and not has_template:
        raise DataError("chat_template: true, but the tokenizer has no chat template")
    return bool(chat_template)


def prompt_token_length(tokenizer: Any, prompt: str | list[dict[str, str]], chat: bool) -> int:
    """Length of a prompt as TRL will tokenize it (chat template, or plain text with specials)."""
    if chat:
        from mutualrl.pools.template_render import bounded_render, tokenizer_name

        ids = bounded_render(tokenizer, lambda: tokenizer.apply_chat_template(
            chat_messages(prompt), add_generation_prompt=True, tokenize=True), f"tokenizer {tokenizer_name(tokenizer)}")
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return len(ids)
    return len(tokenizer(prompt)["input_ids"])


@dataclass
class JointFilterReport:
    kept: int
    dropped: int
    dropped_by_policy: dict[str, int]
    max_tokens: int


def joint_length_filter(
    examples: Sequence[TaskExample],
    lengths: Mapping[str, Callable[[TaskExample], int]],
    max_tokens: int,
) -> tuple[list[TaskExample], JointFilterReport]:
    """Keep examples whose prompt fits ``max_tokens`` for EVERY policy (``lengths``: policy -> the token count of
    an example's prompt for it, e.g. :class:`~mutualrl.training.prompt_lengths.PromptLengths`)."""
    kept: list[TaskExample] = []
    dropped_by_policy = {name: 0 for name in lengths}
    for example in examples:
        too_long = [name for name, length in lengths.items() if length(example) > max_tokens]
        for name in too_long:
            dropped_by_policy[name] += 1
        if not too_long:
            kept.append(example)
    report = JointFilterReport(len(kept), len(examples) - len(kept), dropped_by_policy, max_tokens)
    return kept, report


def write_examples(path: Path, examples: Sequence[TaskExample]) -> None:
    write_text_atomic(path, "".join(json.dumps({**ex.as_row(), "answer": ex.answer, "meta": ex.meta}) + "\n"
                                    for ex in examples))


def read_examples(path: Path) -> list[TaskExample]:
    """Read a prepared prompt file; a malformed row fails with its line number and field."""
    examples = []
    with path.open() as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
            for key in ("prompt_id", "prompt", "answer", "task"):
                if key not in row:
                    raise DataError(f"{path}:{lineno}: row is missing field {key!r}")
            examples.append(TaskExample(prompt_id=str(row["prompt_id"]), prompt=row["prompt"],
                                        answer=str(row["answer"]), task=row["task"], meta=row.get("meta", {})))
    return examples


def to_trl_rows(examples: Sequence[TaskExample], chat: bool) -> list[dict[str, Any]]:
    """Dataset rows for GRPOTrainer: ``prompt`` (text or chat messages) plus reward columns."""
    rows = []
    for ex in examples:
        row = ex.as_row()
        if chat:
            row["prompt"] = ex.chat_prompt()
        rows.append(row)
    return rows

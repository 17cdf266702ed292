"""GSM8K (Cobbe et al., 2021): grade-school word problems, chain of thought, answer in ``\\boxed{}``.

The gold answer is the number after ``####`` in the reference ``answer`` (thousands
separators removed). The default check is math-verify equivalence, so ``\\$18``,
``18.00`` and ``18`` all match ``18``; ``--verifier exact`` is the paper's strict match.

Splits: ``train`` (7,473) and ``test`` (1,319). Offline only ``test`` exists; asking for
``train`` offline uses it with an :class:`~mutualrl.tasks.sources.EvaluationSplitWarning`.
"""

from __future__ import annotations

from typing import Any

from mutualrl.errors import DataError
from mutualrl.tasks.base import TaskExample
from mutualrl.tasks.dataset_task import BOXED_FMT, DatasetTask
from mutualrl.tasks.sources import HubSpec, require
from mutualrl.tasks.verifiers import score_math

GSM8K_TEMPLATE = "{question} " + BOXED_FMT


def gsm8k_gold(answer: str) -> str | None:
    """``"...\\n#### 1,234"`` -> ``"1234"`` (None without a ``####`` line)."""
    if "####" not in answer:
        return None
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


class GSM8KTask(DatasetTask):
    name = "gsm8k"
    train_rows = 7473
    splits = ("train", "test")
    hub = {
        "train": HubSpec("openai/gsm8k", "main", "train"),
        "test": HubSpec("openai/gsm8k", "main", "test"),
    }
    offline_dataset = "gsm8k"
    offline = {"train": "test", "test": "test"}

    def make_example(self, row: dict[str, Any], index: int, split: str, origin: str) -> TaskExample:
        question = str(require(row, index, "question", origin))
        answer = str(require(row, index, "answer", origin))
        gold = gsm8k_gold(answer)
        if gold is None:
            raise DataError(f"{origin}: row {index}: field 'answer' has no '#### <number>' final answer")
        return TaskExample(
            prompt_id=self.prompt_id(split, index),
            prompt=GSM8K_TEMPLATE.format(question=question),
            answer=gold,
            task=self.name,
        )

    def score(self, completion: str, answer: str) -> float:
        return score_math(completion, answer, "exact" if self.verifier == "exact" else "equiv")

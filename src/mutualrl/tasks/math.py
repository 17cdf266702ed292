"""MATH (Hendrycks et al., 2021): competition problems, chain of thought, answer in ``\\boxed{}``.

Paper, App. "Experimental Setup": the primary benchmark; models are trained on MATH and
validated on its test set with greedy decoding. The gold answer is the last ``\\boxed{}``
of the reference ``solution`` (an ``answer`` field is used only when a row has no
solution, or none boxed). The default check is math-verify equivalence (``--verifier exact`` gives the
paper's strict string match).

Splits: ``train`` (7,500), ``test`` (5,000), ``test500`` (MATH-500, the default for
evaluation). Offline (:mod:`mutualrl.assets.data`) ``test`` and ``test500`` are the real
sets and ``train`` is the 4,500 test problems outside MATH-500 (evaluation data: a
warning says so).
"""

from __future__ import annotations

from typing import Any

from mutualrl.errors import DataError
from mutualrl.tasks.base import TaskExample
from mutualrl.tasks.dataset_task import BOXED_FMT, DatasetTask
from mutualrl.tasks.sources import HubSpec, require
from mutualrl.tasks.verifiers import extract_boxed, score_math

MATH_TEMPLATE = "{problem} " + BOXED_FMT
"""The chain-of-thought prompt (VERL's MATH template, the paper's stack: problem, then the boxed instruction)."""


class MathTask(DatasetTask):
    name = "math"
    train_rows = 7500
    splits = ("train", "test", "test500")
    default_eval_split = "test500"
    hub = {
        "train": HubSpec("DigitalLearningGmbH/MATH-lighteval", "default", "train"),
        "test": HubSpec("DigitalLearningGmbH/MATH-lighteval", "default", "test"),
        "test500": HubSpec("HuggingFaceH4/MATH-500", None, "test"),
    }
    offline_dataset = "math"
    offline = {"train": "train", "test": "test", "test500": "test500"}
    offline_train_note = " (the 4,500 MATH test problems outside MATH-500)"

    def make_example(self, row: dict[str, Any], index: int, split: str, origin: str) -> TaskExample:
        problem = str(require(row, index, "problem", origin))
        solution = row.get("solution")
        if solution is not None:
            gold = extract_boxed(str(solution))
            if gold is None:
                if row.get("answer") is None:
                    raise DataError(f"{origin}: row {index}: field 'solution' has no \\boxed{{}} answer")
                gold = str(row["answer"]).strip()
        else:
            gold = str(require(row, index, "answer", origin)).strip()
        meta = {k: row[k] for k in ("level", "type", "subject", "unique_id") if row.get(k) is not None}
        return TaskExample(
            prompt_id=self.prompt_id(split, index),
            prompt=MATH_TEMPLATE.format(problem=problem),
            answer=gold,
            task=self.name,
            meta=meta,
        )

    def score(self, completion: str, answer: str) -> float:
        return score_math(completion, answer, "exact" if self.verifier == "exact" else "equiv")

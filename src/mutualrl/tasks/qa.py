"""The six QA benchmarks of the paper's extension study, with its exact templates.

Paper, App. "Prompt Templates for Evaluation" (templates) and App. "MATH and Commonsense
Reasoning with Regime 3" (the suite): AI2-ARC, OpenBookQA, BoolQ, PIQA, HellaSwag and
Social IQa, each asked with "Let's think step by step and output the final answer within
\\boxed{}." The gold answer is an option letter (``A``...) or, for BoolQ, ``Yes``/``No``.

Reading of the templates: a ``\\\\[0.5ex]`` break in the paper is a blank line, a plain
``\\\\`` a line break; options are written ``A. text``, one per line. The option range in
"Which option (A-D)" follows the row's number of options (a few ARC questions have 3 or 5).
OpenBookQA's "Fact:" line needs ``fact1`` (the hub's ``additional`` config); rows without
it (the ``main`` config, the offline package) get the template without that line and a
warning. HellaSwag's ``{story}`` is ``activity_label: ctx_a Ctx_b`` with the dataset's
WikiHow markup removed (the standard HellaSwag preprocessing), its endings likewise.

Splits: ``train``, ``validation``, ``test``. BoolQ, PIQA, HellaSwag and Social IQa have no
public test labels, so their ``test`` is the validation set (as in the paper's "respective
test sets"). Offline (:mod:`mutualrl.assets.data`): ARC and OpenBookQA have validation and
test; the other four validation; ``train`` falls back to validation with a warning.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

from mutualrl.errors import DataError
from mutualrl.tasks.base import TaskExample
from mutualrl.tasks.dataset_task import BOXED_FMT, DatasetTask
from mutualrl.tasks.sources import HubSpec, require
from mutualrl.tasks.verifiers import score_choice, score_yes_no

LETTERS = "ABCDEFGHIJ"


def option_range(n: int) -> str:
    """``"A-D"`` for four options."""
    return f"A-{LETTERS[n - 1]}"


def options_text(options: list[str]) -> str:
    return "\n".join(f"{LETTERS[i]}. {text}" for i, text in enumerate(options))


def _int_label(value: Any, index: int, field: str, origin: str, base: int, n: int) -> int:
    """A 0- or 1-based integer label (int or numeric string) -> a 0-based option index."""
    try:
        i = int(str(value).strip()) - base
    except ValueError:
        raise DataError(f"{origin}: row {index}: field {field!r} is {value!r}, not an option number") from None
    if not 0 <= i < n:
        raise DataError(f"{origin}: row {index}: field {field!r} = {value!r} is out of range for {n} options")
    return i


class MultipleChoiceTask(DatasetTask):
    """A lettered multiple-choice task: the gold answer is the correct option's letter."""

    splits = ("train", "validation", "test")

    def score(self, completion: str, answer: str) -> float:
        return score_choice(completion, answer, "exact" if self.verifier == "exact" else "equiv")

    def example(self, split: str, key: Any, prompt: str, gold_index: int, n_options: int) -> TaskExample:
        return TaskExample(
            prompt_id=self.prompt_id(split, key),
            prompt=prompt,
            answer=LETTERS[gold_index],
            task=self.name,
            meta={"n_options": n_options},
        )


def _choices(row: dict[str, Any], index: int, origin: str) -> tuple[list[str], list[str]]:
    """ARC / OpenBookQA ``choices`` -> (texts, labels)."""
    choices = require(row, index, "choices", origin)
    if not isinstance(choices, dict):
        raise DataError(f"{origin}: row {index}: field 'choices' must be a mapping with 'text' and 'label'")
    texts = require(choices, index, "text", f"{origin} (field 'choices')")
    labels = require(choices, index, "label", f"{origin} (field 'choices')")
    if not texts or len(texts) != len(labels) or len(texts) > len(LETTERS):
        raise DataError(f"{origin}: row {index}: field 'choices' has {len(texts)} texts and {len(labels)} labels")
    return [str(t) for t in texts], [str(lab) for lab in labels]


def _gold_from_key(labels: list[str], key: str, index: int, origin: str) -> int:
    if key not in labels:
        raise DataError(f"{origin}: row {index}: field 'answerKey' = {key!r} is not one of the labels {labels}")
    return labels.index(key)


class ARCTask(MultipleChoiceTask):
    """AI2-ARC (Clark et al., 2018); ``arc`` is ARC-Challenge, ``arc-easy`` ARC-Easy."""

    name = "arc"
    train_rows = 1119
    hub_config = "ARC-Challenge"
    offline_dataset = "arc-challenge"
    offline = {"train": "validation", "validation": "validation", "test": "test"}
    template = "{question}\n\nWhich option ({range}) is the correct answer?\n" + BOXED_FMT + "\n\n{choices_text}"

    def __init__(self) -> None:
        self.hub = {s: HubSpec("allenai/ai2_arc", self.hub_config, s) for s in self.splits}

    def make_example(self, row: dict[str, Any], index: int, split: str, origin: str) -> TaskExample:
        question = str(require(row, index, "question", origin))
        texts, labels = _choices(row, index, origin)
        gold = _gold_from_key(labels, str(require(row, index, "answerKey", origin)).strip(), index, origin)
        prompt = self.template.format(question=question, range=option_range(len(texts)),
                                      choices_text=options_text(texts))
        key = row.get("id") if row.get("id") is not None else index
        return self.example(split, key, prompt, gold, len(texts))


class ARCEasyTask(ARCTask):
    name = "arc-easy"
    train_rows = 2251
    hub_config = "ARC-Easy"
    offline_dataset = "arc-easy"


class OpenBookQATask(MultipleChoiceTask):
    """OpenBookQA (Mihaylov et al., 2018), with its supporting fact when the rows carry ``fact1``."""

    name = "openbookqa"
    train_rows = 4957
    hub = {s: HubSpec("allenai/openbookqa", "additional", s) for s in ("train", "validation", "test")}
    offline_dataset = "openbookqa"
    offline = {"train": "validation", "validation": "validation", "test": "test"}
    template = (
        "Fact: {fact1}\n\nQuestion: {question_stem}\n\nWhich option ({range}) is the correct answer?\n"
        + BOXED_FMT + "\n\n{choices_text}"
    )
    template_no_fact = (
        "Question: {question_stem}\n\nWhich option ({range}) is the correct answer?\n"
        + BOXED_FMT + "\n\n{choices_text}"
    )

    def make_example(self, row: dict[str, Any], index: int, split: str, origin: str) -> TaskExample:
        stem = str(require(row, index, "question_stem", origin))
        texts, labels = _choices(row, index, origin)
        gold = _gold_from_key(labels, str(require(row, index, "answerKey", origin)).strip(), index, origin)
        fields = {"question_stem": stem, "range": option_range(len(texts)), "choices_text": options_text(texts)}
        if row.get("fact1") is not None:
            prompt = self.template.format(fact1=row["fact1"], **fields)
        else:
            prompt = self.template_no_fact.format(**fields)
        key = row.get("id") if row.get("id") is not None else index
        ex = self.example(split, key, prompt, gold, len(texts))
        ex.meta["has_fact"] = row.get("fact1") is not None
        return ex

    def after_load(self, examples: list[TaskExample], origin: str) -> None:
        missing = sum(1 for ex in examples if not ex.meta.get("has_fact"))
        if missing:
            warnings.warn(
                f"openbookqa: {missing} of {len(examples)} rows from {origin} have no 'fact1' (the dataset's 'main' "
                "config); their prompts omit the paper's 'Fact:' line. The hub's 'additional' config has the facts.",
                UserWarning,
                stacklevel=3,
            )


class BoolQTask(DatasetTask):
    """BoolQ (Clark et al., 2019): a yes/no question about a passage; gold ``Yes`` or ``No``."""

    name = "boolq"
    train_rows = 9427
    splits = ("train", "validation", "test")
    hub = {
        "train": HubSpec("google/boolq", None, "train"),
        "validation": HubSpec("google/boolq", None, "validation"),
        "test": HubSpec("google/boolq", None, "validation"),
    }
    offline_dataset = "boolq"
    offline = {"train": "validation", "validation": "validation", "test": "validation"}
    template = (
        "Passage: {passage}\n\nQuestion: {question}\n\n"
        "Answer the question with Yes or No based on the passage above.\n" + BOXED_FMT
    )

    def make_example(self, row: dict[str, Any], index: int, split: str, origin: str) -> TaskExample:
        passage = str(require(row, index, "passage", origin))
        question = str(require(row, index, "question", origin))
        if row.get("answer") is not None:
            value = row["answer"]
            if isinstance(value, str):
                if value.strip().lower() not in ("true", "false", "yes", "no"):
                    raise DataError(f"{origin}: row {index}: field 'answer' = {value!r} is not a yes/no value")
                value = value.strip().lower() in ("true", "yes")
            gold = "Yes" if bool(value) else "No"
        elif row.get("label") is not None:  # super_glue/boolq: label 1 = True
            gold = "Yes" if _int_label(row["label"], index, "label", origin, 0, 2) == 1 else "No"
        else:
            require(row, index, "answer", origin)
            raise AssertionError("unreachable")
        return TaskExample(
            prompt_id=self.prompt_id(split, index),
            prompt=self.template.format(passage=passage, question=question),
            answer=gold,
            task=self.name,
        )

    def score(self, completion: str, answer: str) -> float:
        return score_yes_no(completion, answer, "exact" if self.verifier == "exact" else "equiv")


class PIQATask(MultipleChoiceTask):
    """PIQA (Bisk et al., 2020): the better of two solutions to a physical goal."""

    name = "piqa"
    train_rows = 16113
    hub = {
        "train": HubSpec("ybisk/piqa", "default", "train", revision="refs/convert/parquet"),
        "validation": HubSpec("ybisk/piqa", "default", "validation", revision="refs/convert/parquet"),
        "test": HubSpec("ybisk/piqa", "default", "validation", revision="refs/convert/parquet"),
    }
    offline_dataset = "piqa"
    offline = {"train": "validation", "validation": "validation", "test": "validation"}
    template = "{goal}\n\nWhich option (A-B) is the better solution?\n" + BOXED_FMT + "\n\nA. {sol1}\nB. {sol2}"

    def make_example(self, row: dict[str, Any], index: int, split: str, origin: str) -> TaskExample:
        goal = str(require(row, index, "goal", origin))
        sol1 = str(require(row, index, "sol1", origin))
        sol2 = str(require(row, index, "sol2", origin))
        gold = _int_label(require(row, index, "label", origin), index, "label", origin, 0, 2)
        return self.example(split, index, self.template.format(goal=goal, sol1=sol1, sol2=sol2), gold, 2)


def hellaswag_preprocess(text: str) -> str:
    """HellaSwag's standard clean-up: drop WikiHow ``[title]``/``[header]`` markup and double spaces."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


class HellaSwagTask(MultipleChoiceTask):
    """HellaSwag (Zellers et al., 2019): the ending that best completes a story."""

    name = "hellaswag"
    train_rows = 39905
    hub = {
        "train": HubSpec("Rowan/hellaswag", None, "train"),
        "validation": HubSpec("Rowan/hellaswag", None, "validation"),
        "test": HubSpec("Rowan/hellaswag", None, "validation"),
    }
    offline_dataset = "hellaswag"
    offline = {"train": "validation", "validation": "validation", "test": "validation"}
    template = "{story}\n\nWhich option ({range}) best completes the sentence?\n" + BOXED_FMT + "\n\n{joined}"

    def make_example(self, row: dict[str, Any], index: int, split: str, origin: str) -> TaskExample:
        activity = str(require(row, index, "activity_label", origin))
        if row.get("ctx_a") is not None and row.get("ctx_b") is not None:
            ctx = f"{row['ctx_a']} {str(row['ctx_b']).capitalize()}".strip()
        else:
            ctx = str(require(row, index, "ctx", origin))
        endings = require(row, index, "endings", origin)
        if not isinstance(endings, list) or not endings or len(endings) > len(LETTERS):
            raise DataError(f"{origin}: row {index}: field 'endings' must be a non-empty list of strings")
        label = row.get("label")
        if label is None or str(label).strip() == "":
            raise DataError(f"{origin}: row {index} has no field 'label' (HellaSwag's test split is unlabelled)")
        gold = _int_label(label, index, "label", origin, 0, len(endings))
        prompt = self.template.format(
            story=hellaswag_preprocess(f"{activity}: {ctx}"),
            range=option_range(len(endings)),
            joined=options_text([hellaswag_preprocess(str(e)) for e in endings]),
        )
        return self.example(split, index, prompt, gold, len(endings))


class SocialIQaTask(MultipleChoiceTask):
    """Social IQa (Sap et al., 2019): three answers about a social situation; ``label`` is 1-based."""

    name = "siqa"
    train_rows = 33410
    hub = {
        "train": HubSpec("allenai/social_i_qa", "default", "train", revision="refs/convert/parquet"),
        "validation": HubSpec("allenai/social_i_qa", "default", "validation", revision="refs/convert/parquet"),
        "test": HubSpec("allenai/social_i_qa", "default", "validation", revision="refs/convert/parquet"),
    }
    offline_dataset = "siqa"
    offline = {"train": "validation", "validation": "validation", "test": "validation"}
    template = (
        "Context: {context}\n\nQuestion: {question}\n\nWhich option (A-C) is the correct answer?\n"
        + BOXED_FMT + "\n\nA. {answerA}\nB. {answerB}\nC. {answerC}"
    )

    def make_example(self, row: dict[str, Any], index: int, split: str, origin: str) -> TaskExample:
        names = ("context", "question", "answerA", "answerB", "answerC")
        fields = {f: str(require(row, index, f, origin)) for f in names}
        gold = _int_label(require(row, index, "label", origin), index, "label", origin, 1, 3)
        return self.example(split, index, self.template.format(**fields), gold, 3)


QA_TASKS = ("arc", "openbookqa", "boolq", "piqa", "hellaswag", "siqa")
"""The paper's QA suite (``--suite qa``), in the paper's order."""

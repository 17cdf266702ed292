"""``synthetic-arith``: a tiny verifiable arithmetic task for the embedded ``tiny`` pool.

The paper's rewards come only from verifiers (Sec. "Experimental Setup"); this task keeps
that contract at a size a CPU can train in minutes. Every problem is an expression over
three digits with a nonnegative integer answer, in one of two *families*:

- ``add``: ``a+b+c=``  (answers 0..27)
- ``sub``: ``a+b-c=``  with ``a+b >= c`` (answers 0..18)

The two families share their digits and their ``+`` but differ in one operator, so a
model that only knows one of them answers the other with the wrong operation (it is
right only by coincidence, e.g. when ``c = 0``). The tiny pool warm-starts one policy on
each family (:mod:`mutualrl.pools.tiny`), which gives Success-Gated Transfer (paper Sec.
"Regime 3") what it needs: prompts on which one policy's whole group fails while its
peer succeeds, and a skill that a few peer successes can transfer.

Splits are fixed (they do not depend on the training seed): each family's problems are
shuffled with a constant seed and 20% of them are held out as ``test``; ``train`` and
``test`` are disjoint. Examples alternate between families, so any ``limit`` takes a
balanced subset. Prompt ids name the problem (``arith-add-357`` is ``3+5+7=``) and never
change. The verifier reads the first number of the completion.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mutualrl.errors import DataError, UsageError
from mutualrl.tasks.base import Task, TaskExample

TASK_NAME = "synthetic-arith"
#: Seed of the train/test split; a constant, so held-out problems are the same for every run.
SPLIT_SEED = 20240917
#: Share of each family held out as ``test``.
TEST_FRACTION = 0.2
#: Sources accepted by :meth:`SyntheticArithTask.load` (the problems are generated, not read).
GENERATED_SOURCES = (None, "builtin", "offline", "generated")

_NUMBER_RE = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_DIGITS = range(10)


@dataclass(frozen=True)
class ArithFamily:
    """One problem family: a prompt template over digits ``a, b, c`` and its answer."""

    name: str
    template: str  # formatted with a, b, c
    answer: Callable[[int, int, int], int]
    admits: Callable[[int, int, int], bool]
    description: str

    def problems(self) -> list[tuple[int, int, int]]:
        """Every admissible operand triple, in a fixed order."""
        return [(a, b, c) for a in _DIGITS for b in _DIGITS for c in _DIGITS if self.admits(a, b, c)]

    def prompt(self, a: int, b: int, c: int) -> str:
        return self.template.format(a=a, b=b, c=c)

    def prompt_id(self, a: int, b: int, c: int) -> str:
        return f"arith-{self.name}-{a}{b}{c}"


FAMILIES: dict[str, ArithFamily] = {
    f.name: f
    for f in (
        ArithFamily("add", "{a}+{b}+{c}=", lambda a, b, c: a + b + c, lambda a, b, c: True,
                    "sum of three digits"),
        ArithFamily("sub", "{a}+{b}-{c}=", lambda a, b, c: a + b - c, lambda a, b, c: a + b >= c,
                    "two digits added, a third subtracted (never negative)"),
    )
}
FAMILY_NAMES = tuple(FAMILIES)


def family_of(prompt_id: str) -> str:
    """The family of a ``synthetic-arith`` prompt id (``arith-add-357`` -> ``add``)."""
    parts = prompt_id.split("-")
    if len(parts) != 3 or parts[0] != "arith" or parts[1] not in FAMILIES:
        raise DataError(f"{prompt_id!r} is not a {TASK_NAME} prompt id (expected arith-<family>-<abc>)")
    return parts[1]


def family_split(family: str, split: str) -> list[TaskExample]:
    """The examples of one family in one split, in the split's fixed order."""
    fam = FAMILIES[family]
    problems = fam.problems()
    random.Random(f"{SPLIT_SEED}:{family}").shuffle(problems)
    n_test = round(len(problems) * TEST_FRACTION)
    chosen = problems[:n_test] if split == "test" else problems[n_test:]
    return [
        TaskExample(
            prompt_id=fam.prompt_id(a, b, c),
            prompt=fam.prompt(a, b, c),
            answer=str(fam.answer(a, b, c)),
            task=TASK_NAME,
            meta={"family": family, "operands": (a, b, c)},
        )
        for a, b, c in chosen
    ]


def interleave(groups: Iterable[list[TaskExample]]) -> list[TaskExample]:
    """Round-robin over the groups (then the longer ones' tails), so every prefix is balanced."""
    groups = [list(g) for g in groups]
    out: list[TaskExample] = []
    for i in range(max((len(g) for g in groups), default=0)):
        out.extend(g[i] for g in groups if i < len(g))
    return out


def first_number(text: str) -> str | None:
    """The first (ASCII) number in ``text``, e.g. ``' 15</s>'`` -> ``'15'``; None if there is none."""
    match = _NUMBER_RE.search(text)
    return match.group() if match else None


def family_accuracy(scores: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Mean score per family from ``(prompt_id, score)`` pairs (e.g. one validation's results)."""
    totals: dict[str, list[float]] = {}
    for prompt_id, score in scores:
        totals.setdefault(family_of(prompt_id), []).append(float(score))
    return {fam: sum(v) / len(v) for fam, v in sorted(totals.items())}


class SyntheticArithTask(Task):
    """Generated three-digit arithmetic in two complementary families (see the module docstring)."""

    name = TASK_NAME
    splits = ("train", "test")
    default_eval_split = "test"
    verifier_modes = ("default", "exact")
    completion_tokens = 4  # answers are <= 3 tokens with EOS (recipes/pools/tiny.yaml)

    def group_of(self, example: TaskExample) -> str | None:
        """Results are reported per family: the tiny pool's policies are each strong on one."""
        return family_of(example.prompt_id)

    def load(self, split: str, source: str | None = None, limit: int | None = None) -> list[TaskExample]:
        """Both families' problems of ``split``, alternating between families; at most ``limit``."""
        self.check_load(split, source, limit)
        examples = interleave(family_split(f, split) for f in FAMILY_NAMES)
        return examples if limit is None else examples[:limit]

    def check_source(self, source: str | None) -> None:
        """Refused before a launch and in a dry run alike: a source here would be ignored."""
        if source not in GENERATED_SOURCES:
            raise UsageError(
                f"task {self.name!r} generates its problems; task.source must be unset (got {source!r}); "
                "for your own rows use task.name=dataset"
            )

    def answer_text(self, answer: str) -> str:
        """Right after ``a+b+c=``: the number itself."""
        return str(answer)

    def extract(self, completion: str) -> str | None:
        """The answer a completion gives: its first number."""
        return first_number(completion)

    def score(self, completion: str, answer: str) -> float:
        """1.0 if the completion's first number equals the integer ``answer``, else 0.0.

        ``exact`` mode (recipe ``task.verifier: exact``) instead requires the whole completion,
        stripped, to be the answer.
        """
        try:
            gold = int(str(answer).strip())
        except ValueError:
            raise DataError(f"{self.name}: gold answer {answer!r} is not an integer") from None
        if getattr(self, "verifier", "default") == "exact":
            return 1.0 if completion.strip() == str(gold) else 0.0
        given = first_number(completion)
        if given is None:
            return 0.0
        return 1.0 if float(given) == gold else 0.0

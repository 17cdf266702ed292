"""``invented-lexicon``: translate a two-word phrase of one of two invented languages into English.

The two families need different *knowledge*, not digits: ``velish`` and ``ombric`` each have 16 adjectives and
16 nouns that map to the same English words by their own random permutation, and they share no word. Velish
puts the adjective first (``tanu mirok`` -> ``red cat``), Ombric the noun first. A model taught one lexicon knows
nothing of the other, so a short supervised warm start of each real model on one family makes a pool whose
competences differ (benchmarks/results/learning-real-pool.md).

Everything is generated from constant seeds (never the training seed): the words, the lexicons and the split.
Each family has 256 phrases; 100 are held out as ``test`` and every invented word occurs in ``train``, so the
held-out split asks for new combinations of known words.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from mutualrl.errors import DataError, UsageError
from mutualrl.tasks.base import Task, TaskExample

TASK_NAME = "invented-lexicon"
#: Seed of the invented words and of each family's word-to-English permutation.
LEXICON_SEED = 20261129
#: Seed of the train/test split (a constant: held-out prompts are the same for every run).
SPLIT_SEED = 20261130
TEST_PER_FAMILY = 100
#: Sources accepted by :meth:`InventedLexiconTask.load` (the phrases are generated, not read).
GENERATED_SOURCES = (None, "builtin", "offline", "generated")

ENGLISH_ADJECTIVES = ("red", "blue", "green", "black", "white", "brown", "pink", "gray",
                      "big", "small", "old", "young", "tall", "fat", "dark", "pale")
ENGLISH_NOUNS = ("cat", "dog", "fox", "bird", "fish", "horse", "cow", "bear",
                 "wolf", "frog", "duck", "goat", "lion", "mouse", "sheep", "snake")
FAMILY_NAMES = ("velish", "ombric")
_ADJECTIVE_FIRST = {"velish": True, "ombric": False}
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


@dataclass(frozen=True)
class Phrase:
    """One problem: an invented two-word phrase and its English translation."""

    family: str
    adjective: int  # index into ENGLISH_ADJECTIVES
    noun: int  # index into ENGLISH_NOUNS
    source: str  # the invented phrase
    answer: str  # "red cat"

    @property
    def prompt_id(self) -> str:
        return f"lexicon-{self.family}-{self.adjective:02d}{self.noun:02d}"

    @property
    def prompt(self) -> str:
        return f"Translate from {self.family.capitalize()} to English: {self.source}\nEnglish:"


def _invented_words(count: int, rng: random.Random) -> list[str]:
    """``count`` distinct pronounceable words (CV-CV or CV-CVC), none an English word of the task."""
    taken = set(ENGLISH_ADJECTIVES) | set(ENGLISH_NOUNS)
    words: list[str] = []
    while len(words) < count:
        word = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(2))
        if rng.random() < 0.5:
            word += rng.choice(_CONSONANTS)
        if word not in taken:
            taken.add(word)
            words.append(word)
    return words


def lexicons() -> dict[str, tuple[list[str], list[str]]]:
    """family -> (its word for each English adjective, its word for each English noun); disjoint across families."""
    rng = random.Random(LEXICON_SEED)
    words = _invented_words(len(FAMILY_NAMES) * (len(ENGLISH_ADJECTIVES) + len(ENGLISH_NOUNS)), rng)
    out = {}
    for i, family in enumerate(FAMILY_NAMES):
        block = words[i * 32:(i + 1) * 32]
        rng.shuffle(block)  # the family's own permutation onto the English words
        out[family] = (block[:16], block[16:])
    return out


def phrases(family: str) -> list[Phrase]:
    """Every phrase of ``family`` in a fixed order (256)."""
    if family not in FAMILY_NAMES:
        raise DataError(f"invented-lexicon has no family {family!r} (families: {', '.join(FAMILY_NAMES)})")
    adjectives, nouns = lexicons()[family]
    out = []
    for a in range(len(ENGLISH_ADJECTIVES)):
        for n in range(len(ENGLISH_NOUNS)):
            pair = (adjectives[a], nouns[n]) if _ADJECTIVE_FIRST[family] else (nouns[n], adjectives[a])
            out.append(Phrase(family, a, n, " ".join(pair), f"{ENGLISH_ADJECTIVES[a]} {ENGLISH_NOUNS[n]}"))
    return out


def split(family: str) -> dict[str, list[Phrase]]:
    """``{"train": [...], "test": [...]}`` of ``family``: 100 held out, every invented word kept in train."""
    rows = phrases(family)
    rng = random.Random(f"{SPLIT_SEED}-{family}")
    order = list(range(len(rows)))
    rng.shuffle(order)
    test = sorted(order[:TEST_PER_FAMILY])
    train = sorted(order[TEST_PER_FAMILY:])
    seen_adjectives = {rows[i].adjective for i in train}
    seen_nouns = {rows[i].noun for i in train}
    if len(seen_adjectives) < len(ENGLISH_ADJECTIVES) or len(seen_nouns) < len(ENGLISH_NOUNS):
        raise DataError(f"invented-lexicon split of {family}: a word never occurs in train (change SPLIT_SEED)")
    return {"train": [rows[i] for i in train], "test": [rows[i] for i in test]}


def family_of(prompt_id: str) -> str:
    """``lexicon-velish-0312`` -> ``velish``."""
    parts = prompt_id.split("-")
    if len(parts) != 3 or parts[0] != "lexicon" or parts[1] not in FAMILY_NAMES:
        raise DataError(f"not an invented-lexicon prompt id: {prompt_id!r}")
    return parts[1]


def score(completion: str, answer: str) -> float:
    """1.0 when the completion's first line, stripped, lower-cased, one trailing '.' removed, is the answer."""
    lines = completion.strip().splitlines()
    first = lines[0].strip().lower() if lines else ""
    if first.endswith("."):
        first = first[:-1].rstrip()
    return 1.0 if first == answer else 0.0


def family_rows(family: str, which: str) -> list[Phrase]:
    """The phrases of one family in one split (``train`` or ``test``), in the split's fixed order."""
    return split(family)[which]


def example(phrase: Phrase) -> TaskExample:
    """One phrase as the package's example: the prompt text the warm start was trained and measured on."""
    return TaskExample(prompt_id=phrase.prompt_id, prompt=phrase.prompt, answer=phrase.answer, task=TASK_NAME,
                       meta={"family": phrase.family})


class InventedLexiconTask(Task):
    """Two invented languages to translate into English (the module docstring); results per family."""

    name = TASK_NAME
    splits = ("train", "test")
    default_eval_split = "test"
    completion_tokens = 6  # "red cat" and an end of text; the warm start was measured at 6 new tokens

    def group_of(self, example: TaskExample) -> str | None:
        """Results are reported per family: each warm-started policy knows one lexicon."""
        return family_of(example.prompt_id)

    def load(self, split: str, source: str | None = None, limit: int | None = None) -> list[TaskExample]:
        """Both families' phrases of ``split``, alternating between families (any prefix is balanced)."""
        self.check_load(split, source, limit)
        per_family = [family_rows(f, split) for f in FAMILY_NAMES]
        rows = [example(phrase) for pair in zip(*per_family, strict=True) for phrase in pair]
        return rows if limit is None else rows[:limit]

    def check_source(self, source: str | None) -> None:
        """Refused before a launch and in a dry run alike: a source here would be ignored."""
        if source not in GENERATED_SOURCES:
            raise UsageError(f"task {self.name!r} generates its phrases; task.source must be unset (got {source!r})")

    def answer_text(self, answer: str) -> str:
        """Right after ``English:``: a space and the two English words."""
        return f" {answer}"

    def extract(self, completion: str) -> str | None:
        """The answer a completion gives: its first line, stripped (None when it is empty)."""
        lines = completion.strip().splitlines()
        return lines[0].strip() if lines else None

    def score(self, completion: str, answer: str) -> float:
        """The warm start's verifier, :func:`score`: the first line, lower-cased, one trailing '.' dropped."""
        return score(completion, answer)

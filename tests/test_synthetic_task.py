"""synthetic-arith: fixed disjoint splits, stable prompt ids, a verifier that reads the first number."""

from __future__ import annotations

import pytest

from mutualrl.errors import DataError, UsageError
from mutualrl.tasks import get_task
from mutualrl.tasks.synthetic import FAMILIES, FAMILY_NAMES, SyntheticArithTask, family_accuracy, family_of


@pytest.fixture(scope="module")
def task() -> SyntheticArithTask:
    return SyntheticArithTask()


def test_registered_under_its_name():
    assert isinstance(get_task("synthetic-arith"), SyntheticArithTask)


def test_splits_are_disjoint_complete_and_deterministic(task):
    train, test = task.load("train"), task.load("test")
    assert train == SyntheticArithTask().load("train") and test == SyntheticArithTask().load("test")
    train_ids, test_ids = {e.prompt_id for e in train}, {e.prompt_id for e in test}
    assert len(train_ids) == len(train) and len(test_ids) == len(test)  # ids unique
    assert not train_ids & test_ids
    assert not {e.prompt for e in train} & {e.prompt for e in test}
    total = sum(len(f.problems()) for f in FAMILIES.values())
    assert len(train) + len(test) == total
    assert 0.15 < len(test) / total < 0.25
    for fam in FAMILY_NAMES:  # every family is in both splits
        assert any(e.meta["family"] == fam for e in test) and any(e.meta["family"] == fam for e in train)


def test_prompt_ids_name_the_problem(task):
    by_id = {e.prompt_id: e for e in task.load("train") + task.load("test")}
    add, sub = by_id["arith-add-357"], by_id["arith-sub-952"]
    assert (add.prompt, add.answer, add.meta["family"]) == ("3+5+7=", "15", "add")
    assert (sub.prompt, sub.answer) == ("9+5-2=", "12")
    assert "arith-sub-019" not in by_id  # 0+1-9 < 0: not a problem
    for e in by_id.values():
        a, b, c = e.meta["operands"]
        assert e.prompt_id == f"arith-{e.meta['family']}-{a}{b}{c}"
        assert int(e.answer) == FAMILIES[e.meta["family"]].answer(a, b, c) >= 0
        assert family_of(e.prompt_id) == e.meta["family"]


def test_limit_takes_a_balanced_prefix(task):
    first = task.load("test", limit=10)
    assert [e.meta["family"] for e in first] == ["add", "sub"] * 5
    assert first == task.load("test")[:10]
    assert task.load("train", limit=0) == []


@pytest.mark.parametrize(
    "completion, answer, expected",
    [
        ("15", "15", 1.0),
        (" 15", "15", 1.0),
        ("15 and then 3", "15", 1.0),
        ("The answer is 15.", "15", 1.0),
        ("15.0", "15", 1.0),
        ("0", "0", 1.0),
        ("14", "15", 0.0),
        ("-15", "15", 0.0),
        ("15.5", "15", 0.0),
        ("3 + 12 = 15", "15", 0.0),  # the first number counts
        ("151", "15", 0.0),
    ],
)
def test_verifier_reads_the_first_number(task, completion, answer, expected):
    assert task.score(completion, answer) == expected


@pytest.mark.parametrize("completion", ["", "   ", "fifteen", "</s>", "\x00\x01", "\uff11\uff15", "+-=."])
def test_malformed_completions_score_zero(task, completion):
    assert task.score(completion, "15") == 0.0
    assert task.extract(completion) is None


def test_bad_gold_answer_names_it(task):
    with pytest.raises(DataError, match="'x1'"):
        task.score("1", "x1")


def test_bad_split_source_or_limit_are_usage_errors(task):
    with pytest.raises(UsageError, match="split 'validation'"):
        task.load("validation")
    with pytest.raises(UsageError, match="generates its problems"):
        task.load("train", source="data/my.jsonl")
    with pytest.raises(UsageError, match="limit"):
        task.load("train", limit=-1)
    with pytest.raises(DataError, match="not a synthetic-arith prompt id"):
        family_of("gsm8k-17")


def test_family_accuracy_groups_scores():
    scores = [("arith-add-111", 1.0), ("arith-add-222", 0.0), ("arith-sub-321", 1.0)]
    assert family_accuracy(scores) == {"add": 0.5, "sub": 1.0}


@pytest.mark.parametrize("tokenizer", ["gpt2", "mistral-sp"])
def test_prompts_are_short_for_both_tiny_tokenizers(task, tokenizer):
    from mutualrl.assets.tokenizers import load_tokenizer

    tok = load_tokenizer(tokenizer)
    lengths = {len(tok(e.prompt)["input_ids"]) for e in task.load("test")}
    assert max(lengths) <= 8  # recipes/pools/tiny.yaml allows 16

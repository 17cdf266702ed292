"""Few-shot task variants (tasks/few_shot.py): fixed prefix, demonstrations never trained on or held out."""

from __future__ import annotations

import warnings

import pytest

from mutualrl.errors import UnknownNameError
from mutualrl.tasks.few_shot import parse_few_shot
from mutualrl.tasks.registry import get_task, resolve_suite, task_groups


pytestmark = pytest.mark.usefixtures("offline_hub")


def test_names() -> None:
    assert parse_few_shot("synthetic-arith-4shot") == ("synthetic-arith", 4)
    assert parse_few_shot("openbookqa-line-12shot") == ("openbookqa-line", 12)
    assert parse_few_shot("synthetic-arith") is None and parse_few_shot("arc-0shot") is None
    assert resolve_suite("synthetic-arith-2shot,arc") == ["synthetic-arith-2shot", "arc"]
    with pytest.raises(UnknownNameError, match="nosuch-4shot"):
        get_task("nosuch-4shot")


def test_arith_prefix_is_written_out_by_hand() -> None:
    # The first 4 training problems of synthetic-arith are 2+4+5, 8+9-1, 6+0+6, 4+6-9 (fixed split seed).
    base_train = [ex.prompt for ex in get_task("synthetic-arith").load("train", None, 4)]
    assert base_train == ["2+4+5=", "8+9-1=", "6+0+6=", "4+6-9="]
    task = get_task("synthetic-arith-4shot")
    first = task.load("test", None, 1)[0]
    assert first.prompt == "2+4+5=11\n\n8+9-1=16\n\n6+0+6=12\n\n4+6-9=1\n\n3+8+4="
    assert first.prompt_id == "synthetic-arith-4shot/arith-add-384" and first.answer == "15"
    assert task.group_of(first) == "add"
    assert task_groups(task.name, [first]) == {first.prompt_id: "add"}
    assert task.score(" 15\n\n", first.answer) == 1.0 and task.score("13", first.answer) == 0.0


def test_demonstrations_are_in_no_split() -> None:
    task, base = get_task("synthetic-arith-4shot"), get_task("synthetic-arith")
    demos = {ex.prompt for ex in base.load("train", None, 4)}
    train, test = task.load("train"), task.load("test")
    assert len(train) == len(base.load("train")) - 4 and len(test) == len(base.load("test"))
    assert not any(ex.prompt.rsplit("\n\n", 1)[1] in demos for ex in train + test)
    assert len(task.load("train", None, 10)) == 10


def test_evaluation_rows_used_as_train_give_no_held_out_demonstration() -> None:
    # GSM8K's offline package has no train split: 'train' reads the test rows, so the demonstrations
    # are test rows and must leave the held-out split.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        task, base = get_task("gsm8k-4shot"), get_task("gsm8k")
        demos = base.load("train", "offline", 4)
        test = task.load("test", "offline", 3)
    assert {d.prompt_id.split("/")[-1] for d in demos} == {"00000", "00001", "00002", "00003"}
    assert [ex.meta["base_prompt_id"] for ex in test] == ["gsm8k/test/00004", "gsm8k/test/00005", "gsm8k/test/00006"]
    assert test[0].prompt.startswith(demos[0].prompt + f" \\boxed{{{demos[0].answer}}}\n\n")


def test_answer_line_demonstrations_write_the_letter() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        line = get_task("boolq-line").load("train", "offline", 1)[0]
        shot = get_task("boolq-line-1shot").load("test", "offline", 1)[0]
    assert shot.prompt.startswith(line.prompt + " " + line.answer.capitalize() + "\n\n")
    assert get_task("arc-easy-line").answer_text("b") == " B"
    assert get_task("boolq-line-1shot").with_verifier("default").name == "boolq-line-1shot"

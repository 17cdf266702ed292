"""A reward function's parameters against the dataset's columns (issue 50, item 5): a parameter no column provides
is refused before the launch, in the dry run too, in one line naming the function, the parameter and the columns
there are; a missing column is never filled with ""."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from mutualrl.errors import DataError
from mutualrl.launch.run import TrainOptions, run_train
from mutualrl.tasks.base import TaskExample
from mutualrl.tasks.reward_funcs import RewardSpec, check_reward_columns, required_columns

REWARDS = '''
def exact(prompts, completions, completion_ids, answer, **kwargs):  # the README's
    return [1.0 if c.strip().startswith(str(a)) else 0.0 for c, a in zip(completions, answer)]

def optional_answer(prompts, completions, answer=None, *, trainer_state=None, log_metric=None, **kwargs):
    return [None if answer is None else 0.0 for _ in completions]

def by_level(completions, level, **kwargs):
    return [float(x) for x in level]
'''


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "col_rewards.py").write_text(REWARDS)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("".join(json.dumps({"prompt": f"{i}+1=", "result": i + 1}) + "\n"
                                                           for i in range(20)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    sys.modules.pop("col_rewards", None)


def options(tmp_path: Path, func: str, task: str = "dataset", dry_run: bool = True) -> TrainOptions:
    overrides = [f"task.name={task}", f"task.reward_funcs=[col_rewards.{func}]"]
    if task == "dataset":
        overrides.append("task.source=data")
    return TrainOptions(pool="tiny", regime="sgt", output_dir=tmp_path / "run", max_steps=1, dry_run=dry_run,
                        overrides=overrides)


@pytest.mark.parametrize("dry_run", [True, False])
def test_the_readme_reward_on_a_dataset_without_answer_is_refused_before_the_launch(project: Path,
                                                                                    dry_run: bool) -> None:
    with pytest.raises(DataError) as refused:
        run_train(options(project, "exact", dry_run=dry_run), Console(file=io.StringIO()))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("task.reward_funcs[0] col_rewards.exact: parameter 'answer' is no column of ")
    assert "train.jsonl" in message and "(its columns: prompt_id, result, task)" in message
    assert not (project / "run").exists()  # nothing was written


def test_a_builtin_task_names_its_own_columns(project: Path) -> None:
    with pytest.raises(DataError, match=r"parameter 'level' is no column of task synthetic-arith's rows \(its "
                                        r"columns: answer, prompt_id, task\)"):
        run_train(options(project, "by_level", task="synthetic-arith"), Console(file=io.StringIO()))


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_parameters_with_defaults_and_those_trl_passes_need_no_column(project: Path) -> None:
    sys.path.insert(0, str(project))
    import col_rewards

    assert required_columns(col_rewards.exact) == ["answer"]
    assert required_columns(col_rewards.optional_answer) == []
    assert required_columns(len) == []  # nothing to read: not refused
    check_reward_columns(RewardSpec(task="dataset", funcs=("col_rewards.optional_answer",)), {"result"}, "data")
    assert run_train(options(project, "optional_answer"), Console(file=io.StringIO())) == 0


def test_a_row_without_a_column_hands_the_reward_functions_none_of_it() -> None:
    """TRL passes the columns a dataset has: no ``answer`` column, no ``answer`` argument (it was "")."""
    example = TaskExample(prompt_id="dataset/train/00000", prompt="2+3=", answer="", task="dataset",
                          meta={"columns": {"result": 5}})
    assert example.as_row() == {"result": 5, "prompt_id": "dataset/train/00000", "prompt": "2+3=", "task": "dataset"}
    builtin = TaskExample(prompt_id="math/1", prompt="1+1=", answer="2", task="math")
    assert builtin.as_row()["answer"] == "2"


def test_trls_own_reward_without_its_column_asks_for_the_column_not_a_renamed_parameter() -> None:
    """TRL's function cannot be edited: a dataset without 'solution' is told to add that column."""
    with pytest.raises(DataError) as refused:
        check_reward_columns(RewardSpec(task="dataset", funcs=("accuracy_reward",)), {"prompt_id", "answer"},
                             "data/train.jsonl")
    message = str(refused.value)
    assert "parameter 'solution' is no column of data/train.jsonl" in message
    assert message.endswith("add a column named solution (TRL's accuracy_reward reads it)")
    assert "rename" not in message

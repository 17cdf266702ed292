"""Validation and ``mutualrl eval`` call a reward function with what ``GRPOTrainer._calculate_rewards`` passes
besides the columns, as training does: a function that reads ``trainer_state`` (reward shaping by training
progress, as TRL documents) or calls ``log_metric``/``log_extra`` passed the check before the launch, trained, and
then stopped the run at its first validation with "missing 1 required positional argument"."""

from __future__ import annotations

import sys
import types

import pytest
from transformers import TrainerState

from mutualrl.evaluation.generate import score_examples
from mutualrl.tasks.base import TaskExample
from mutualrl.tasks.reward_funcs import RewardSpec, required_columns

SEEN: list = []


def shaped(completions, trainer_state, **kwargs):
    SEEN.append(trainer_state.global_step)
    return [min(1.0, trainer_state.global_step / max(trainer_state.max_steps, 1))] * len(completions)


def logs(completions, log_metric, log_extra, **kwargs):
    log_metric("mine/length", 1.0)
    log_extra("mine", ["x"] * len(completions))
    return [1.0] * len(completions)


@pytest.fixture()
def module(monkeypatch: pytest.MonkeyPatch) -> str:
    mod = types.ModuleType("trl_arguments_rewards")
    mod.shaped, mod.logs = shaped, logs
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return mod.__name__


EXAMPLES = [TaskExample(prompt_id=f"p{i}", prompt=f"{i}+1=", answer=str(i + 1), task="synthetic-arith")
            for i in range(3)]


def test_a_function_of_trls_arguments_is_not_refused_before_the_launch():
    assert required_columns(shaped) == [] and required_columns(logs) == []


def test_validation_and_eval_pass_trainer_state_and_the_logging_callbacks(module: str):
    spec = RewardSpec(task="synthetic-arith", verifier="default", funcs=(f"{module}.shaped", f"{module}.logs"))
    state = TrainerState(global_step=5, max_steps=10)  # validation: the training's own state
    SEEN.clear()
    scored = score_examples(EXAMPLES, ["1", "2", "3"], spec, None, False, trainer_state=state)
    assert [r.score for r in scored] == [2.5, 2.5, 2.5] and SEEN == [5]  # verifier 1 + shaped 0.5 + logs 1
    scored = score_examples(EXAMPLES, ["1", "2", "3"], spec)  # mutualrl eval of models: a state of its own
    assert [r.score for r in scored] == [2.0, 2.0, 2.0] and SEEN == [5, 0]

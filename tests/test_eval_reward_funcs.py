"""``mutualrl eval`` scores one's own task on named models (issue 49, item 5): ``--suite dataset --source DIR``
takes ``--reward-funcs`` (comma-separated or repeated, resolved and checked as ``task.reward_funcs``, the
columns too), and models named without a recipe generate the task's own completion length, not 1024 tokens."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from mutualrl.launch.evaluate import eval_settings, run_eval_command
from mutualrl.errors import DataError, UsageError

REWARDS = '''
def starts_with_answer(prompts, completions, answer, **kwargs):
    return [1.0 if str(c).strip().startswith(str(a)) else 0.0 for c, a in zip(completions, answer)]

def half(completions, **kwargs):
    return [0.5 for _ in completions]

def needs_answr(completions, answr, **kwargs):
    return [0.0 for _ in completions]
'''


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "eval_rewards.py").write_text(REWARDS)
    (tmp_path / "data").mkdir()
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(1, 7)]
    (tmp_path / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    sys.modules.pop("eval_rewards", None)


def evaluate(funcs: list[str] | None, suite: str = "dataset") -> tuple[list, dict]:
    return run_eval_command("builtin:tiny-bpe", suite, limit=4, split=None, source="data", max_new_tokens=None,
                            batch_size=None, device="cpu", backend="transformers", verifier=None, chat_template=None,
                            tokenizer=None, max_prompt_tokens=None, log=Console(file=io.StringIO()), bars=False,
                            reward_funcs=funcs)


@pytest.mark.slow
def test_named_models_are_scored_on_ones_own_dataset_with_the_named_functions(project: Path) -> None:
    results, meta = evaluate(["eval_rewards.half", "eval_rewards.starts_with_answer"])
    assert meta["verifier"] == "eval_rewards.half + eval_rewards.starts_with_answer"
    assert meta["tasks"] == ["dataset"] and meta["max_new_tokens"] == 64  # the dataset task's own length
    [result] = results
    scores = [record.score for record in result.records]
    assert len(scores) == 4 and all(s in (0.5, 1.5) for s in scores)


def test_the_command_line_takes_the_option_comma_separated_and_repeated(project: Path) -> None:
    from mutualrl.cli.main import app

    out = CliRunner().invoke(app, ["eval", "builtin:tiny-bpe", "--suite", "dataset", "--source", "data", "--limit",
                                   "2", "--device", "cpu", "--reward-funcs", "eval_rewards.half,eval_rewards.half",
                                   "--reward-funcs", "eval_rewards.starts_with_answer", "-o", "ev.json"])
    assert out.exit_code == 0, out.output
    meta = json.loads((project / "ev.json").read_text())
    assert meta["verifier"] == "eval_rewards.half + eval_rewards.half + eval_rewards.starts_with_answer"


def test_a_parameter_no_column_provides_is_one_line_before_any_model_loads(project: Path) -> None:
    with pytest.raises(DataError) as refused:
        evaluate(["eval_rewards.needs_answr"])
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("--reward-funcs[0] eval_rewards.needs_answr: parameter 'answr' is no column of "
                              "--source data (its columns: answer, prompt, prompt_id, task)")


def test_names_resolve_as_task_reward_funcs_and_a_dataset_needs_them(project: Path) -> None:
    with pytest.raises(UsageError, match=r"--reward-funcs\[0\].*nope"):
        evaluate(["nope"])
    with pytest.raises(UsageError, match="no built-in verifier: name its reward functions with --reward-funcs"):
        evaluate(None)
    with pytest.raises(UsageError, match="--reward-funcs scores one task"):
        evaluate(["eval_rewards.half"], suite="gsm8k,math")


def test_models_without_a_recipe_generate_the_tasks_own_length() -> None:
    def length(suite: str, given: int | None = None) -> int:
        return eval_settings(None, suite, source=None, verifier=None, max_new_tokens=given, batch_size=None,
                             max_prompt_tokens=None).max_new_tokens

    assert length("synthetic-arith") == 4  # answers of at most 3 tokens, as the tiny pool trains
    assert length("arc-easy-line") == 8  # an answer line, as the smol-qa pool trains
    assert length("math") == 1024  # a task that states none: as before
    assert length("synthetic-arith", given=32) == 32  # --max-new-tokens wins

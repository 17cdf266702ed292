"""Every entry point refuses what it cannot use in one line: a reward function that raises or exits while the
go/no-go scores; huge numbers wherever they enter (an eval score, a whole-number setting, --plan-seeds); a held-out
split with repeats or training prompts is said before training; a chat template the tokenizer lacks is refused by
the dry run naming the policy; an eval file without records is named, not dropped. In process."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

from mutualrl.cli.main import run
from mutualrl.errors import DataError, UsageError
from mutualrl.evaluation.results import ModelEvalResult, prompt_result
from mutualrl.evaluation.seed_plan import check_effect, plan_lines
from mutualrl.launch.rundir.prepare import held_out_warning
from mutualrl.tasks.base import TaskExample
from mutualrl.tasks.reward_funcs import score_batch


def raises(**_):
    return 1 / 0


def exits(**_):
    sys.exit(3)


@pytest.mark.parametrize(("func", "words"), [(raises, "raised ZeroDivisionError: division by zero"),
                                             (exits, "raised SystemExit: 3")])
def test_a_reward_function_that_raises_or_exits_is_one_line_naming_it(func, words):
    with pytest.raises(DataError) as caught:
        score_batch(SimpleNamespace(weights=None), ["p"], ["c"], [[1]], {}, funcs=[func])
    said = str(caught.value)
    assert f"reward function {func.__name__!r} {words}" in said and "\n" not in said


@pytest.mark.parametrize("score", [1e308, -1e13, 10**400])
def test_an_eval_score_beyond_any_rewards_range_is_refused_naming_the_record(score):
    with pytest.raises(DataError) as caught:
        prompt_result({"prompt_id": "p1", "task": "t", "score": score}, 3, "eval/a/step-4.json")
    assert str(caught.value).startswith("eval/a/step-4.json: record 3: score") and "\n" not in str(caught.value)


def test_huge_whole_numbers_on_the_command_line_are_one_line(tmp_path, capsys):
    for flag, value, words in (("--gpus", "99999999999999999999", "launch.gpus: must be a whole number of at most"),
                               ("--gpus", "5000", "launch.gpus: must be <= 1024")):
        assert run(["train", "--dry-run", flag, value, "-o", str(tmp_path / "run")]) == 2
        said = capsys.readouterr().err.strip()
        assert words in said and len(said.splitlines()) == 1, said


@pytest.mark.parametrize("stated", ["seed=1e160,prompt=0.002", "seed=0.0004,prompt=1e300,interaction=0.05"])
def test_plan_seeds_refuses_a_variance_no_reward_difference_has(stated):
    with pytest.raises(UsageError, match="beyond any variance of a reward difference"):
        plan_lines(stated, 0.05)
    with pytest.raises(UsageError, match="--min-effect"):
        check_effect(1e200)


def rows(prompts):
    return [TaskExample(prompt_id=f"r{i}", prompt=p, answer="1", task="t") for i, p in enumerate(prompts)]


def test_a_held_out_split_with_repeats_or_training_prompts_is_said():
    train = rows([f"train {i}" for i in range(40)])
    doubled = rows([f"held {i}" for i in range(12)] * 2)
    said = held_out_warning(train, doubled)
    assert said is not None and "12 of its 24 rows repeat a prompt (12 distinct)" in said
    said = held_out_warning(train, rows(["train 3", "train  5 ", "held 1"]))  # whitespace is no difference
    assert said is not None and "2 of its prompts are training prompts too" in said
    assert held_out_warning(train, rows(["held 1", "held 2"])) is None


def test_the_dry_run_refuses_a_chat_template_the_tokenizer_lacks_naming_the_policy(tmp_path, capsys):
    code = run(["train", "--dry-run", "--check-rows", "0", "--set", "pool.policies.tiny-sp.chat_template=true",
                "-o", str(tmp_path / "run")])
    said = capsys.readouterr().err.strip()
    assert code == 2 and said.startswith("error: policy tiny-sp: chat_template: true, but the tokenizer has no chat")
    assert len(said.splitlines()) == 1


def test_a_report_names_an_eval_file_with_no_records(tmp_path):
    from mutualrl.evaluation.report.build import final_values
    from report_fakes import write_finished_run

    run_dir = write_finished_run(tmp_path / "run", "sgt", 0, {"tiny-bpe": [1.0, 0.0], "tiny-sp": [0.0, 1.0]})
    assert set(final_values(run_dir).values) == {"tiny-bpe", "tiny-sp"}
    last = run_dir / "eval" / "tiny-sp" / "step-000003.json"
    data = json.loads(last.read_text())
    last.write_text(json.dumps({**data, "records": []}))
    with pytest.raises(DataError) as caught:
        final_values(run_dir)
    said = str(caught.value)
    assert said.startswith(f"{last}: holds no records") and "policy tiny-sp" in said and "\n" not in said

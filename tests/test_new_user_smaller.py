"""The smaller things a new user tripped on (issue 49, item 8), one test each: Ctrl-C names the checkpoint and the
--resume command; ``extends: tiny`` finds the named recipe; ``assets list`` says where built-in models are; the dry
run sizes a local model folder and echoes what each ``--set`` changed; a ``trl grpo`` YAML's ``max_prompt_length``
is ``task.max_prompt_tokens``; ``pools show --explain`` gives TRL's own help; a simulated node names --gpu-memory."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from mutualrl.config.loader import load_run_config
from mutualrl.launch.run import TrainOptions, run_train
from mutualrl.run_folder import RunPaths


def printed(call) -> str:
    out = io.StringIO()
    call(Console(file=out, width=200))
    return out.getvalue()


@pytest.mark.user_start
def test_an_interrupted_run_names_its_checkpoint_and_the_resume_command(tmp_path: Path, monkeypatch) -> None:
    from mutualrl.launch.rundir import resume
    from mutualrl.launch.rundir.summary import print_failure
    from mutualrl.launch.supervise.runner import RunOutcome

    paths = RunPaths(tmp_path / "my run")
    for policy, steps in (("a", (2, 4)), ("b", (2,))):
        for step in steps:
            (paths.policy_dir(policy) / f"checkpoint-{step}").mkdir(parents=True)
    monkeypatch.setattr(resume, "checkpoint_problem", lambda folder: None)  # each one complete
    outcome = RunOutcome(ok=False, returncodes={"a": None, "b": None}, reason="interrupted")
    text = printed(lambda console: print_failure(outcome, paths, console))
    assert text.splitlines()[0] == "run stopped: interrupted"
    assert (f"to go on from checkpoint-2 of every policy ({paths.policies}/<policy>/checkpoint-2): "
            f"mutualrl train --resume -o '{paths.root}'") in text
    shutil.rmtree(paths.policies)
    text = printed(lambda console: print_failure(outcome, paths, console))
    assert "to go on from its start (no checkpoint was saved yet): mutualrl train --resume -o" in text


def test_extends_takes_a_recipe_name_as_pool_does(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("extends: tiny\ngrpo:\n  learning_rate: 3.0e-5\n")
    config = load_run_config(str(tmp_path / "mine.yaml")).config
    assert config.pool.name == "tiny" and config.grpo["learning_rate"] == 3.0e-5
    (tmp_path / "typo.yaml").write_text("extends: tinny\n")
    with pytest.raises(Exception, match=r"not found, nor a recipe named 'tinny' \(`mutualrl pools` lists"):
        load_run_config(str(tmp_path / "typo.yaml"))


def test_assets_list_says_where_each_builtin_model_folder_is() -> None:
    from mutualrl.cli.main import app
    from mutualrl.pools.smol import smol_model_dir
    from mutualrl.pools.tiny import tiny_model_dir

    out = CliRunner().invoke(app, ["assets", "list"], env={"COLUMNS": "300"})
    assert out.exit_code == 0, out.output
    assert f"model:tiny-bpe" in out.output and str(tiny_model_dir("tiny-bpe")) in out.output
    assert str(smol_model_dir("gemma3-270m")) in out.output


def dry(tmp_path: Path, pool: str, overrides: list[str]) -> str:
    options = TrainOptions(pool=pool, output_dir=tmp_path / "run", dry_run=True, overrides=overrides)
    return printed(lambda console: run_train(options, console))


def test_the_dry_run_sizes_a_local_model_folder_and_echoes_each_set(tmp_path: Path) -> None:
    from mutualrl.pools.builtin import ensure_builtin_model

    folder = tmp_path / "my-model"
    shutil.copytree(ensure_builtin_model("tiny-bpe"), folder)
    text = dry(tmp_path, "tiny", [f"pool.policies.tiny-bpe.model={folder}", "grpo.learning_rate=2e-5",
                                  "validation.limit=7"])
    row = next(line for line in text.splitlines() if "tiny-bpe" in line and "GiB" in line)
    assert "unknown size" not in row and "(weights)" in row
    assert "--set pool.policies.tiny-bpe.model: 'builtin:tiny-bpe' -> " + repr(str(folder)) in text
    assert "--set grpo.learning_rate: " in text and "-> 2e-05" in text
    assert "--set validation.limit: " in text and "-> 7" in text
    for weights in folder.glob("*.safetensors"):
        weights.unlink()  # only config.json left: estimated from it
    text = dry(tmp_path, "tiny", [f"pool.policies.tiny-bpe.model={folder}"])
    row = next(line for line in text.splitlines() if "tiny-bpe" in line and "GiB" in line)
    assert "(config)" in row


def test_a_trl_yaml_max_prompt_length_is_the_tasks_prompt_limit(tmp_path: Path) -> None:
    (tmp_path / "grpo.yaml").write_text("model_name_or_path: builtin:tiny-bpe\nmodels: [builtin:tiny-bpe, "
                                        "builtin:tiny-sp]\ndataset_name: data\nreward_funcs: [accuracy_reward]\n"
                                        "max_prompt_length: 48\nlearning_rate: 1.0e-5\n")
    from mutualrl.config.loader import load_recipe_data
    from mutualrl.config.trl_config import from_trl_config

    recipe = from_trl_config(load_recipe_data(tmp_path / "grpo.yaml"), str(tmp_path / "grpo.yaml"))
    assert recipe["task"]["max_prompt_tokens"] == 48 and "max_prompt_length" not in recipe["grpo"]
    (tmp_path / "grpo.yaml").write_text("model_name_or_path: builtin:tiny-bpe\nmax_prompt_length: null\n")  # TRL: no limit
    recipe = from_trl_config(load_recipe_data(tmp_path / "grpo.yaml"), str(tmp_path / "grpo.yaml"))
    assert "max_prompt_tokens" not in recipe["task"] and "max_prompt_length" not in recipe["grpo"]
    with pytest.raises(Exception, match="max_prompt_length.*is task.max_prompt_tokens"):  # in a recipe's grpo
        load_run_config("tiny", overrides=["grpo.max_prompt_length=48"])


def test_pools_show_explain_gives_trls_own_help_for_grpo_keys() -> None:
    from mutualrl.cli.pools_cmd import explain_lines

    lines = explain_lines(load_run_config("tiny").config)
    at = lines.index(next(line for line in lines if line.startswith("grpo.learning_rate = ")))
    assert "The initial learning rate for AdamW" in lines[at + 1]
    assert not any("(see TRL's documentation)" in line for line in lines)


def test_the_skipped_memory_check_of_a_simulated_node_names_gpu_memory(tmp_path: Path) -> None:
    from plan_helpers import dry_run

    plan = dry_run("qwen-phi4", gpus=8, run_dir=tmp_path)
    [warning] = [w for w in plan.warnings if "memory check skipped" in w]
    assert "--gpu-memory GIB" in warning


def test_the_readme_says_where_mutualrl_is_before_its_first_bare_command_and_cites_the_paper_by_arxiv_id() -> None:
    import re

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    lines = readme.splitlines()
    first_bare = next(i for i, line in enumerate(lines) if re.match(r"mutualrl \w", line))
    assert "source .venv/bin/activate" in "\n".join(lines[:first_bare])
    assert "arXiv:2605.07244" in readme and "shared/paper" not in readme


GROUP_REWARDS = "def half(completions, **kwargs):\n    return [0.5 if str(c) else 0.0 for c in completions]\n"


@pytest.mark.slow
def test_a_group_column_breaks_results_down_by_its_values(tmp_path: Path, monkeypatch) -> None:
    import json
    import sys

    from mutualrl.cli.eval_cmd import group_lines
    from mutualrl.errors import DataError
    from mutualrl.evaluation.results import ModelEvalResult, PromptResult, group_rewards
    from mutualrl.launch.evaluate import run_eval_command
    from mutualrl.tasks.registry import task_from_config, task_groups

    (tmp_path / "group_rewards.py").write_text(GROUP_REWARDS)
    (tmp_path / "data").mkdir()
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1), "level": ("easy", "hard")[i % 2]} for i in range(8)]
    for split in ("train", "test"):
        (tmp_path / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "group_rewards", raising=False)

    # validation in a worker: eval/group/<value>/reward@1, which the end-of-run table shows per group
    config = load_run_config("tiny", overrides=["task.name=dataset", "task.source=data", "task.group_column=level",
                                                "task.reward_funcs=[group_rewards.half]"]).config
    examples = task_from_config(config.task).load("test", "data")
    group_of = task_groups(config.task.name, examples, config.task.group_column)
    assert sorted(set(group_of.values())) == ["easy", "hard"]
    result = ModelEvalResult("m", [PromptResult(e.prompt_id, e.task, "", "", "", None, float(i % 2 == 0))
                                   for i, e in enumerate(examples)])
    assert group_rewards(result.metrics(group_of=group_of)) == {"easy": 1.0, "hard": 0.0}

    # mutualrl eval of named models: --group-column
    results, meta = run_eval_command(
        "builtin:tiny-bpe", "dataset", limit=4, split=None, source="data", max_new_tokens=2, batch_size=None,
        device="cpu", backend="transformers", verifier=None, chat_template=None, tokenizer=None,
        max_prompt_tokens=None, log=Console(file=io.StringIO()), bars=False, reward_funcs=["group_rewards.half"],
        group_column="level")
    assert meta["groups"]["column"] == "level" and set(meta["groups"]["reward@1"]["tiny-bpe"]) == {"easy", "hard"}
    assert group_lines(meta)[0] == "\nreward@1 by level:" and group_lines(meta)[1].startswith("  tiny-bpe: easy ")

    # a column the rows lack is refused before the launch (the dry run too)
    options = TrainOptions(pool="tiny", output_dir=tmp_path / "run", dry_run=True, overrides=[
        "task.name=dataset", "task.source=data", "task.group_column=levl", "task.reward_funcs=[group_rewards.half]"])
    with pytest.raises(DataError, match="task.group_column 'levl' is no column of .*its columns: answer, level"):
        run_train(options, Console(file=io.StringIO()))

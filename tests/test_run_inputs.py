"""A run records its user code (module file and hash) and its data copy (hashes) as it starts; ``--resume``
refuses other code or data by name before importing anything, and ``eval RUN`` scores the run's own copy."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from mutualrl.assets.tokenizers import load_tokenizer
from mutualrl.errors import DataError, UsageError
from mutualrl.launch.rundir.inputs import check_resume_inputs, code_changes, record_inputs, user_modules
from mutualrl.run_folder import RunPaths
from mutualrl.tasks.base import TaskExample
from mutualrl.training.data import EVAL_FILE, TRAIN_FILE, write_examples
from test_cli_errors import _stored_run, assert_one_line_error, run_cli
from test_eval_generate import tiny_llama

REWARDS = "def exact(completions, answer, **kw):\n    return [1.0 for _ in completions]\n"
HOSTILE = "import pathlib\npathlib.Path('IMPORTED').write_text('ran')\n" + REWARDS


@pytest.fixture()
def started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A run started from ``tmp_path/home`` with a reward module there, its data copy written and recorded."""
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir(), elsewhere.mkdir()
    (home / "g_rewards.py").write_text(REWARDS)
    (elsewhere / "g_rewards.py").write_text(HOSTILE)
    monkeypatch.chdir(home)
    monkeypatch.setattr(sys, "path", list(sys.path))
    run = _stored_run(home / "run", regime="xgrpo")
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["task"]["reward_funcs"] = ["g_rewards.exact"]
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    paths = RunPaths(run)
    examples = [TaskExample(f"own/{i}", f"{i}+1=", str(i + 1), "synthetic-arith") for i in range(3)]
    write_examples(paths.data / TRAIN_FILE, examples)
    write_examples(paths.data / EVAL_FILE, examples[:2])
    record_inputs(paths, type("C", (), {"task": type("T", (), {"reward_funcs": ["g_rewards.exact", "accuracy_reward"],
                                                               "name": "synthetic-arith"}), "plugins": []})())
    yield paths, home, elsewhere
    sys.modules.pop("g_rewards", None)


def test_the_record_names_each_user_module_and_data_file(started) -> None:
    paths, home, _ = started
    record = json.loads(paths.inputs.read_text())
    assert list(record["code"]) == ["g_rewards"]  # TRL's own reward is no user code
    assert record["code"]["g_rewards"]["file"] == str(home / "g_rewards.py")
    assert sorted(record["data"]) == [EVAL_FILE, TRAIN_FILE]
    assert code_changes(paths) == []
    check_resume_inputs(paths)


def test_resume_refuses_changed_code_by_name(started) -> None:
    paths, home, _ = started
    (home / "g_rewards.py").write_text(REWARDS.replace("1.0", "0.0"))
    with pytest.raises(UsageError, match=r"module 'g_rewards' \(.*g_rewards.py\) changed since the run started"):
        check_resume_inputs(paths)


def test_resume_from_another_folder_never_imports_its_module_of_the_same_name(started, capsys, monkeypatch) -> None:
    paths, _, elsewhere = started
    monkeypatch.chdir(elsewhere)
    code, err = run_cli(["train", "-o", str(paths.root), "--resume"], capsys)
    assert_one_line_error(code, err, f"module 'g_rewards' is now {elsewhere / 'g_rewards.py'}", "the run used")
    assert not (elsewhere / "IMPORTED").exists() and "g_rewards" not in sys.modules


def test_resume_refuses_a_changed_data_copy_naming_the_file(started) -> None:
    paths, _, _ = started
    with (paths.data / TRAIN_FILE).open("a") as fh:
        fh.write(json.dumps({"prompt_id": "x", "prompt": "evil", "answer": "1", "task": "synthetic-arith"}) + "\n")
    with pytest.raises(DataError, match=f"{paths.data / TRAIN_FILE} changed since the run started"):
        check_resume_inputs(paths)
    (paths.data / EVAL_FILE).unlink()
    with pytest.raises(DataError, match="is missing since the run started|changed since"):
        check_resume_inputs(paths)


def test_user_modules_are_the_reward_plugin_and_task_modules() -> None:
    config = type("C", (), {"task": type("T", (), {"reward_funcs": ["a.b.f", "think_format_reward", "a.b.g"],
                                                   "name": "pkg.tasks:MyTask"}), "plugins": ["plug", "x.py"]})()
    assert user_modules(config) == ["a.b", "plug", "x.py", "pkg.tasks"]


@pytest.mark.slow
def test_eval_of_a_run_scores_its_own_data_copy_not_the_current_source(started, capsys, offline_hub) -> None:
    paths, home, _ = started
    tokenizer = load_tokenizer("gpt2")
    config = yaml.safe_load(paths.config.read_text())
    config["pool"]["policies"], config["regime"] = config["pool"]["policies"][:1], {"name": "standalone"}
    config["task"]["reward_funcs"] = []
    paths.config.write_text(yaml.safe_dump(config))
    final = paths.final_model(config["pool"]["policies"][0]["name"])
    tiny_llama(tokenizer, 0).save_pretrained(final)
    tokenizer.save_pretrained(final)
    out = home / "out.json"
    capsys.readouterr()
    code, err = run_cli(["eval", str(paths.root), "--device", "cpu", "--backend", "transformers",
                         "--max-new-tokens", "2", "-o", str(out)], capsys)
    assert code == 0, err
    ids = [r["prompt_id"] for r in json.loads(out.read_text())["results"][0]["records"]]
    assert ids == ["own/0", "own/1"]  # the run's held-out copy, not synthetic-arith's rows
    (paths.data / EVAL_FILE).write_text((paths.data / EVAL_FILE).read_text().replace("0+1=", "9+9="))
    code, err = run_cli(["eval", str(paths.root), "--device", "cpu", "--backend", "transformers", "-o", str(out),
                         "--overwrite"], capsys)
    assert_one_line_error(code, err, f"{paths.data / EVAL_FILE} changed since the run started")
    shutil.rmtree(final.parent.parent)

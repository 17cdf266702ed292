"""`mutualrl eval` on a run folder and on its checkpoints (issue 27): every policy's final model, labelled by
policy and folder; a policy folder or an unfinished run fails with one line naming the folders to pass."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mutualrl.assets.tokenizers import load_tokenizer
from mutualrl.cli.main import app
from mutualrl.evaluation.results import load_results
from test_eval_generate import tiny_llama


pytestmark = pytest.mark.usefixtures("offline_hub")


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RUN/config.yaml and RUN/policies/<name>/{final,checkpoint-2} holding two tiny models, as a run leaves them."""
    root = tmp_path_factory.mktemp("run")
    recipe = {"pool": {"name": "tinytest", "policies": [{"name": "bpe", "model": "builtin:tiny-bpe"},
                                                         {"name": "sp", "model": "builtin:tiny-sp"}]},
              "regime": {"name": "standalone"}, "task": {"name": "gsm8k", "source": "offline"},
              "grpo": {"max_completion_length": 3}, "validation": {"batch_size": 2}}
    (root / "config.yaml").write_text(yaml.safe_dump(recipe))
    for name, tokenizer_name, seed in (("bpe", "gpt2", 0), ("sp", "mistral-sp", 1)):
        tokenizer = load_tokenizer(tokenizer_name)
        final = root / "policies" / name / "final"
        tiny_llama(tokenizer, seed).save_pretrained(final)
        tokenizer.save_pretrained(final)
        shutil.copytree(final, final.with_name("checkpoint-2"))
    return root


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_eval_of_a_run_folder_evaluates_every_final_model_with_the_runs_settings(run_folder, tmp_path):
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["eval", str(run_folder), "--limit", "2", "--device", "cpu", "-o", str(out)],
                                terminal_width=400)
    assert result.exit_code == 0, result.output
    results = load_results(out)
    assert [r.name for r in results] == ["bpe/final", "sp/final"]
    assert all(r.tasks == ["gsm8k"] and r.n == 2 and r.settings["max_new_tokens"] == 3 for r in results)


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_eval_of_a_checkpoint_is_labelled_by_policy_and_folder(run_folder, tmp_path):
    out = tmp_path / "ckpt.json"
    checkpoint, final = run_folder / "policies" / "bpe" / "checkpoint-2", run_folder / "policies" / "sp" / "final"
    result = CliRunner().invoke(app, ["eval", f"{checkpoint},{final}", "--suite", "gsm8k", "--limit", "1",
                                      "--max-new-tokens", "2", "--device", "cpu", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert [r.name for r in load_results(out)] == ["bpe/checkpoint-2", "sp/final"]


def test_eval_of_a_policy_folder_names_the_model_folders_in_it(run_folder):
    line = one_line_error(CliRunner().invoke(app, ["eval", str(run_folder / "policies" / "bpe")],
                                             terminal_width=400))
    assert "not a model folder" in line and "checkpoint-2" in line and "final" in line


def test_eval_of_an_unfinished_run_names_its_checkpoints(run_folder, tmp_path):
    unfinished = tmp_path / "unfinished"
    shutil.copytree(run_folder, unfinished)
    shutil.rmtree(unfinished / "policies" / "sp" / "final")
    line = one_line_error(CliRunner().invoke(app, ["eval", str(unfinished)], terminal_width=400))
    assert "no final model for sp: it has no run.json" in line
    assert str(unfinished / "policies" / "sp" / "checkpoint-2") in line


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_eval_of_a_policy_folder_uses_the_chat_template_the_run_trained_it_on(tmp_path):
    """'RUN/policies/<p>/final' has no instruct/chat in its name: the prompt form comes from the run's config (the
    policy's chat_template), not from the folder's name, and one line per model says which form was used."""
    from mutualrl.config.resolved import policy_chat_template

    root = tmp_path / "run1"
    recipe = {"pool": {"name": "tinytest", "policies": [{"name": "talker", "model": "builtin:tiny-bpe",
                                                         "chat_template": True},
                                                        {"name": "bare", "model": "builtin:tiny-bpe"}]},
              "regime": {"name": "standalone"}, "task": {"name": "gsm8k", "source": "offline"}}
    (root).mkdir()
    (root / "config.yaml").write_text(yaml.safe_dump(recipe))
    tokenizer = load_tokenizer("gpt2")
    tokenizer.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
    for name in ("talker", "bare"):
        final = root / "policies" / name / "final"
        tiny_llama(tokenizer, 0).save_pretrained(final)
        tokenizer.save_pretrained(final)
    assert policy_chat_template(root / "policies" / "talker" / "final") is True
    assert policy_chat_template(root / "policies" / "bare" / "final") is False  # unset: the worker used plain text
    assert policy_chat_template(tmp_path) is None
    out = tmp_path / "chat.json"
    talker, bare = root / "policies" / "talker" / "final", root / "policies" / "bare" / "final"
    result = CliRunner().invoke(app, ["eval", f"{talker},{bare}", "--suite", "gsm8k", "--limit", "1",
                                      "--max-new-tokens", "2", "--device", "cpu", "-o", str(out)],
                                terminal_width=400)
    assert result.exit_code == 0, result.output
    assert [r.settings["chat_template"] for r in load_results(out)] == [True, False]
    assert "talker/final: prompts as the chat template" in result.output
    assert "bare/final: prompts as plain text" in result.output

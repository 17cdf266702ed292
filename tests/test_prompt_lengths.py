"""The launcher's prompt counts are remembered per tokenizer, so a launch that counted them before loads no
tokenizer (no transformers, torch or DeepSpeed import: ~3 s of CPU per launch)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from e2e_helpers import child_env
from mutualrl.assets.cache import cache_dir
from mutualrl.assets.tokenizers import load_tokenizer
from mutualrl.errors import DataError, UnknownNameError
from mutualrl.tasks.base import TaskExample
from mutualrl.training.data import joint_length_filter
from mutualrl.training.prompt_lengths import PromptLengths

EXAMPLES = [TaskExample(prompt_id=f"p{i}", prompt=f"What is {i} plus {i * 7}? " * (1 + i % 3), answer=str(8 * i),
                        task="t") for i in range(12)]


@pytest.fixture
def tokenizers(tmp_path, monkeypatch):
    """Copies of two real tokenizers (Qwen3 has a chat template, GPT-2 none) and an empty mutualrl cache."""
    source = cache_dir() / "tokenizers"
    folders = {name: shutil.copytree(source / name, tmp_path / name) for name in ("qwen3", "gpt2")}
    monkeypatch.setenv("MUTUALRL_CACHE", str(tmp_path / "cache"))
    return folders


def test_counts_match_the_tokenizer_and_a_second_launch_loads_none(tokenizers):
    folder = str(tokenizers["qwen3"])
    first = PromptLengths(folder, None)
    counted = [first(e) for e in EXAMPLES]
    tokenizer = load_tokenizer(folder)
    assert counted == [len(tokenizer(e.prompt)["input_ids"]) for e in EXAMPLES]
    first.save()
    second = PromptLengths(folder, None)
    assert [second(e) for e in EXAMPLES] == counted and not second.tokenizer_loaded


def test_chat_counts_are_kept_apart_from_plain_ones(tokenizers):
    folder = str(tokenizers["qwen3"])
    plain, chat = PromptLengths(folder, None), PromptLengths(folder, True)
    plain_counts = [plain(e) for e in EXAMPLES]
    plain.save()
    chat_counts = [chat(e) for e in EXAMPLES]
    tokenizer = load_tokenizer(folder)
    expected = [len(tokenizer.apply_chat_template(e.chat_prompt(), add_generation_prompt=True, tokenize=True)
                    ["input_ids"]) for e in EXAMPLES]
    assert chat_counts == expected and chat_counts != plain_counts
    chat.save()
    again = PromptLengths(folder, True)
    assert [again(e) for e in EXAMPLES] == chat_counts and not again.tokenizer_loaded


def test_a_changed_tokenizer_file_is_counted_again(tokenizers):
    folder = tokenizers["gpt2"]
    first = PromptLengths(str(folder), None)
    [first(e) for e in EXAMPLES]
    first.save()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 77}))
    changed = PromptLengths(str(folder), None)
    assert changed.memo_path != first.memo_path
    changed(EXAMPLES[0])
    assert changed.tokenizer_loaded


def wrong_counts(memo_text: str) -> str:
    memo = json.loads(memo_text)
    return json.dumps({"lengths": {key: str(value) for key, value in memo["lengths"].items()},
                       "has_chat_template": 3})


@pytest.mark.parametrize("damage", [lambda text: "not json {", lambda text: "[1, 2]", wrong_counts],
                         ids=["not-json", "a-list", "wrong-types"])
def test_a_damaged_memo_is_ignored_and_written_again(tokenizers, damage):
    folder = str(tokenizers["gpt2"])
    first = PromptLengths(folder, None)
    counted = [first(e) for e in EXAMPLES]
    first.save()
    first.memo_path.write_text(damage(first.memo_path.read_text()))
    again = PromptLengths(folder, None)
    assert [again(e) for e in EXAMPLES] == counted and again.tokenizer_loaded
    again.save()
    assert sorted(json.loads(first.memo_path.read_text())["lengths"].values()) == sorted(counted)


def test_a_chat_template_asked_of_a_tokenizer_without_one_is_refused_from_the_memo_too(tokenizers):
    folder = str(tokenizers["gpt2"])
    with pytest.raises(DataError, match="has no chat template"):
        PromptLengths(folder, True)(EXAMPLES[0])
    plain = PromptLengths(folder, None)
    plain(EXAMPLES[0])
    plain.save()
    remembered = PromptLengths(folder, True)
    with pytest.raises(DataError, match="has no chat template"):
        remembered(EXAMPLES[0])
    assert not remembered.tokenizer_loaded


def test_an_unwritable_cache_costs_the_memo_not_the_run(tokenizers, tmp_path):
    folder = str(tokenizers["gpt2"])
    lengths = PromptLengths(folder, None)
    kept, report = joint_length_filter(EXAMPLES, {"a": lengths}, max_tokens=12)
    assert 0 < report.kept < len(EXAMPLES) and kept == [e for e in EXAMPLES if lengths(e) <= 12]
    lengths.memo_path.parent.parent.mkdir(parents=True, exist_ok=True)
    lengths.memo_path.parent.write_text("a file where the memo folder goes")  # unwritable, even for root
    lengths.save()  # no error
    assert lengths.memo_path.parent.is_file()


def test_a_cpu_build_of_torch_sees_no_gpu_without_importing_torch():
    code = "import sys; from mutualrl.launch.plan.detect import detect_gpus; print(detect_gpus(), 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), check=True)
    assert done.stdout.split() == ["0", "False"]


def test_a_chat_template_in_a_subfolder_is_part_of_the_fingerprint(tokenizers):
    """transformers reads ``additional_chat_templates/default.jinja`` as the chat template: editing it counts again."""
    folder = tokenizers["gpt2"]
    (folder / "additional_chat_templates").mkdir()
    template = folder / "additional_chat_templates" / "default.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    first = PromptLengths(str(folder), True)
    counted = first(EXAMPLES[0])
    first.save()
    template.write_text("{% for m in messages %}<|user|> {{ m['content'] }} <|end|> {% endfor %}<|assistant|>")
    load_tokenizer.cache_clear()  # a launch is a new process; this test's process caches tokenizers by path
    again = PromptLengths(str(folder), True)
    assert again.memo_path != first.memo_path and again(EXAMPLES[0]) > counted and again.tokenizer_loaded


def test_a_tokenizer_name_that_cannot_load_is_refused_before_any_data():
    with pytest.raises(UnknownNameError, match="unknown tokenizer 'qwne3'.*Did you mean 'qwen3'"):
        PromptLengths("qwne3", None)


def test_an_unreadable_tokenizer_folder_is_counted_without_a_memo(tokenizers, monkeypatch):
    import mutualrl.training.prompt_lengths as prompt_lengths

    def unreadable(folder):
        raise PermissionError(13, "Permission denied", str(folder / "tokenizer.json"))

    monkeypatch.setattr(prompt_lengths, "tokenizer_fingerprint", unreadable)
    lengths = PromptLengths(str(tokenizers["gpt2"]), None)
    assert lengths.memo_path is None and lengths(EXAMPLES[0]) > 0
    lengths.save()  # nothing to write, no error

"""A shared cache is checked where it is read (issue 93, class 3): a prompt-length memo count that would drop a prompt
is counted again by the tokenizer (every ``sub`` prompt marked 999 tokens dropped the family, rc 0); a tiny model
whose weights and ``mutualrl-files.json`` were both rewritten is refused by ``train`` against the packaged digest
where the build context is the recorded one; a folder the cache builds has the modes the umask gives (another
account reads it), not mkdtemp's 0700. In process, in a cache of the test's own."""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from mutualrl.assets.cache import FILES_RECORD, building, cache_dir, record_files
from mutualrl.errors import AssetError
from mutualrl.pools import tiny, tiny_digests
from mutualrl.pools.builtin import ensure_builtin_models
from mutualrl.tasks.base import TaskExample
from mutualrl.training.data import joint_length_filter
from mutualrl.training.prompt_lengths import PromptLengths

EXAMPLES = [TaskExample(prompt_id=f"p{i}", prompt=f"{i}-{i // 2}=", answer=str(i - i // 2), task="sub")
            for i in range(10, 22)]


@pytest.fixture
def gpt2(tmp_path, monkeypatch):
    """A copy of the real GPT-2 tokenizer and an empty mutualrl cache."""
    folder = shutil.copytree(cache_dir() / "tokenizers" / "gpt2", tmp_path / "gpt2")
    monkeypatch.setenv("MUTUALRL_CACHE", str(tmp_path / "cache"))
    return str(folder)


def test_a_memo_count_that_would_drop_a_prompt_is_counted_again_by_the_tokenizer(gpt2):
    first = PromptLengths(gpt2, None, max_tokens=16)
    true_counts = [first(e) for e in EXAMPLES]
    assert max(true_counts) <= 16
    first.save()
    memo = json.loads(first.memo_path.read_text())
    memo["lengths"] = {key: 999 for key in memo["lengths"]}  # another account marks every prompt too long
    first.memo_path.write_text(json.dumps(memo))

    again = PromptLengths(gpt2, None, max_tokens=16)
    kept, report = joint_length_filter(EXAMPLES, {"tiny-bpe": again}, 16)
    assert kept == EXAMPLES and report.dropped == 0 and again.tokenizer_loaded
    again.save()
    assert sorted(json.loads(again.memo_path.read_text())["lengths"].values()) == sorted(true_counts)  # corrected

    trusted = PromptLengths(gpt2, None, max_tokens=16)  # a count that keeps its prompt is taken as remembered
    assert [trusted(e) for e in EXAMPLES] == true_counts and not trusted.tokenizer_loaded


@pytest.fixture
def tiny_cache(tmp_path, monkeypatch):
    """Copies of both built tiny models in a cache of the test's own, and a packaged record that holds for this
    machine's build context with the copies' own digests (the real record holds for the tested set's machine)."""
    built = {name: tiny.ensure_tiny_model(name) for name in tiny.TINY_NAMES}
    monkeypatch.setenv("MUTUALRL_CACHE", str(tmp_path / "cache"))
    for name, folder in built.items():
        shutil.copytree(folder, tiny.tiny_model_dir(name))
    record = {"built_with": tiny_digests.build_context(),
              "recipe_hash": {name: spec.recipe_hash() for name, spec in tiny.TINY_MODELS.items()},
              "sha256": {name: tiny_digests.weights_digest(tiny.tiny_model_dir(name)) for name in tiny.TINY_NAMES}}
    monkeypatch.setattr(tiny_digests, "read_record", lambda path=None: record)
    return record


def test_train_refuses_a_tiny_model_rewritten_with_its_files_record(tiny_cache):
    assert set(ensure_builtin_models(["tiny-bpe", "tiny-sp"])) == {"tiny-bpe", "tiny-sp"}  # as packaged: trains
    folder = tiny.tiny_model_dir("tiny-bpe")
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-8:] = bytes(range(8))
    weights.write_bytes(bytes(data))
    record_files(folder)  # the record rewritten to match: the folder's own check passes
    assert tiny.tiny_model_problem("tiny-bpe") is None
    with pytest.raises(AssetError) as err:
        ensure_builtin_models(["tiny-bpe"])
    said = str(err.value)
    assert said.startswith(f"{weights}: ") and "packaged digest" in said and "\n" not in said
    assert "mutualrl assets fetch model:tiny-bpe" in said and f"{tiny_digests.ALLOW_OTHER_WEIGHTS_ENV}=1" in said


def test_a_cpu_that_builds_other_weights_may_train_with_them_when_the_user_says_so(tiny_cache, monkeypatch):
    folder = tiny.tiny_model_dir("tiny-bpe")
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[::-1])
    record_files(folder)
    with pytest.raises(AssetError):
        ensure_builtin_models(["tiny-bpe"])
    monkeypatch.setenv(tiny_digests.ALLOW_OTHER_WEIGHTS_ENV, "1")
    assert "tiny-bpe" in ensure_builtin_models(["tiny-bpe"])


def test_a_tiny_model_of_another_build_context_is_not_compared(tiny_cache, monkeypatch):
    folder = tiny.tiny_model_dir("tiny-sp")
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[::-1])
    record_files(folder)
    monkeypatch.setitem(tiny_cache, "built_with", {**tiny_cache["built_with"], "torch": "0.0.0"})
    assert "tiny-sp" in ensure_builtin_models(["tiny-sp"])  # doctor says "unchecked"; nothing to compare with


def test_a_built_cache_folder_has_the_modes_the_umask_gives(tmp_path):
    old = os.umask(0o022)
    try:
        with building(tmp_path / "models" / "m") as tmp:
            (tmp / "sub").mkdir(mode=0o700)
            (tmp / "sub" / "weights.bin").write_bytes(b"x")
            os.chmod(tmp / "sub" / "weights.bin", 0o600)
            (tmp / "run.sh").write_text("#!/bin/sh\n")
            os.chmod(tmp / "run.sh", 0o700)
    finally:
        os.umask(old)
    dest = tmp_path / "models" / "m"
    modes = {path.relative_to(dest).as_posix(): stat.S_IMODE(path.stat().st_mode)
             for path in [dest, *dest.rglob("*")]}
    assert modes == {".": 0o755, "sub": 0o755, "sub/weights.bin": 0o644, "run.sh": 0o755, FILES_RECORD: 0o644}


def test_a_cache_file_this_account_may_not_read_is_one_line_naming_it_and_what_to_do(tmp_path, monkeypatch):
    """An older mutualrl built cache folders 0700: another account's `train` died with a PermissionError traceback.
    (The suite runs as root, which no mode stops: the error is made here as the kernel gives it.)"""
    import errno

    from mutualrl.cli.common import permission_line

    monkeypatch.setenv("MUTUALRL_CACHE", str(tmp_path / "cache"))
    private = tmp_path / "cache" / "models" / "tiny-bpe-x"
    private.mkdir(parents=True, mode=0o700)
    private.chmod(0o700)
    line = permission_line(PermissionError(errno.EACCES, "Permission denied", str(private / "config.json")))
    assert line.startswith(f"{private / 'config.json'}: permission denied ") and "\n" not in line
    assert "mode 700" in line and "MUTUALRL_CACHE" in line and "chmod -R a+rX" in line

"""Shared files neither trusted blindly nor unreadable: the prompt-length memo of the shared cache is read only when
no other account could have written it (a count saying a long prompt is short would change which prompts train),
and the weights mutualrl saves are readable as the user's umask says (transformers writes them 0600)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from mutualrl.assets.cache import umask_file_modes
from mutualrl.training.data import joint_length_filter
from mutualrl.training.prompt_lengths import PromptLengths
from test_prompt_lengths import EXAMPLES, tokenizers  # noqa: F401 - the fixture

LIMIT = 12


def counted_truly(folder: str) -> list:
    lengths = PromptLengths(folder, None)
    kept, _ = joint_length_filter(EXAMPLES, {"a": lengths}, max_tokens=LIMIT)
    lengths.save()
    return kept


def rewrite_short(memo_path) -> None:
    """What a colleague's account writes: every prompt 1 token long."""
    memo = json.loads(memo_path.read_text())
    memo_path.write_text(json.dumps({**memo, "lengths": {key: 1 for key in memo["lengths"]}}))


def test_the_memo_a_launch_writes_is_this_accounts_alone(tokenizers):  # noqa: F811
    counted_truly(str(tokenizers["gpt2"]))
    memo = next((tokenizers["gpt2"].parent / "cache" / "prompt-lengths").glob("*.json"))
    assert memo.stat().st_uid == os.getuid() and not memo.stat().st_mode & 0o022


def test_a_memo_others_could_write_never_changes_which_prompts_train(tokenizers, monkeypatch):  # noqa: F811
    folder = str(tokenizers["gpt2"])
    truth = counted_truly(folder)
    assert 0 < len(truth) < len(EXAMPLES)  # some prompts are dropped: the memo could make them train
    memo = PromptLengths(folder, None).memo_path

    rewrite_short(memo)
    memo.chmod(0o666)  # group- and world-writable: a colleague's write
    lengths = PromptLengths(folder, None)
    kept, report = joint_length_filter(EXAMPLES, {"a": lengths}, max_tokens=LIMIT)
    assert kept == truth and report.kept == len(truth) and lengths.tokenizer_loaded

    rewrite_short(memo)
    memo.chmod(0o644)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(memo).st_uid + 1)  # the file is another account's
    kept, _ = joint_length_filter(EXAMPLES, {"a": PromptLengths(folder, None)}, max_tokens=LIMIT)
    assert kept == truth


def test_a_memo_link_or_fifo_is_no_memo(tokenizers):  # noqa: F811
    folder = str(tokenizers["gpt2"])
    truth = counted_truly(folder)
    memo = PromptLengths(folder, None).memo_path
    elsewhere = memo.with_name("elsewhere.json")
    memo.rename(elsewhere)
    rewrite_short(elsewhere)
    memo.symlink_to(elsewhere)
    kept, _ = joint_length_filter(EXAMPLES, {"a": PromptLengths(folder, None)}, max_tokens=LIMIT)
    assert kept == truth
    memo.unlink()
    os.mkfifo(memo)
    kept, _ = joint_length_filter(EXAMPLES, {"a": PromptLengths(folder, None)}, max_tokens=LIMIT)
    assert kept == truth


def test_saved_weights_get_the_umasks_mode(tmp_path):
    weights, config = tmp_path / "model.safetensors", tmp_path / "config.json"
    for path, mode in ((weights, 0o600), (config, 0o600)):
        path.write_bytes(b"x")
        path.chmod(mode)
    previous = os.umask(0o027)
    try:
        umask_file_modes(tmp_path)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(weights.stat().st_mode) == 0o640  # 0666 under the umask 027
    assert stat.S_IMODE(config.stat().st_mode) == 0o600  # not weights: left as written


@pytest.mark.slow
def test_a_runs_weights_are_readable_as_its_umask_says(sgt_3_steps):
    run, _ = sgt_3_steps
    umask = os.umask(0)
    os.umask(umask)
    weights = sorted(run.rglob("*.safetensors"))
    assert weights
    for path in weights:
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path

"""What a hostile or damaged run folder holds is one line naming it, never a traceback: a symlink loop on
``--resume``, a safetensors file cut short on ``eval``."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutualrl.assets.tokenizers import load_tokenizer
from test_cli_errors import _stored_run, assert_one_line_error, run_cli, workdir  # noqa: F401 - fixture
from test_eval_generate import tiny_llama

pytestmark = pytest.mark.usefixtures("offline_hub")


def test_resume_of_a_run_folder_with_a_symlink_loop_is_one_line(workdir, capsys):  # noqa: F811
    run_dir = _stored_run(workdir / "run")
    (run_dir / "metrics").mkdir()
    (run_dir / "metrics" / "a").symlink_to(run_dir / "metrics" / "b")
    (run_dir / "metrics" / "b").symlink_to(run_dir / "metrics" / "a")
    code, err = run_cli(["train", "-o", "run", "--resume"], capsys)
    assert_one_line_error(code, err, "symlink loop", str(run_dir / "metrics"))


def test_eval_of_a_checkpoint_with_truncated_weights_names_the_file(workdir, capsys):  # noqa: F811
    tokenizer = load_tokenizer("gpt2")
    checkpoint = workdir / "run" / "policies" / "bpe" / "checkpoint-2"
    tiny_llama(tokenizer, 0).save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    weights = checkpoint / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    capsys.readouterr()  # the save's progress bar
    code, err = run_cli(["eval", str(checkpoint), "--suite", "gsm8k", "--source", "offline", "--limit", "1",
                         "--device", "cpu", "--backend", "transformers"], capsys)
    assert_one_line_error(code, err, str(weights), "damaged weights")
    weights.write_bytes(data[:5])  # not even a header
    code, err = run_cli(["eval", str(checkpoint), "--suite", "gsm8k", "--source", "offline", "--limit", "1",
                         "--device", "cpu", "--backend", "transformers"], capsys)
    assert_one_line_error(code, err, str(weights), "damaged weights")
    assert not Path("eval-results").exists()

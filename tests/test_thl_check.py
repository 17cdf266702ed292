"""`mutualrl thl-check`: the acceptance table over all 36 pairs, model-scored diagnostics, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mutualrl.assets.tokenizers import THL_TOKENIZERS
from mutualrl.cli.main import app
from mutualrl.thl.corpus import builtin_corpus

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("thl_tokenizers")  # the six vocabularies, loaded (fetched if needed) once

MIXED = [
    "Proof. Let $x \\in \\mathbb{R}$; then $x^2 \\ge 0$. 证明完毕。\n\n```python\nprint(sum(range(10)))\n```",
    "混合テキスト: Python 3.12 では `match` 文が使えます。Then   back\tto English 🦙!",
    "   \t\n  leading whitespace, 한국어 문장, and trailing runs  \n\n",
    "$$\\int_0^1 x\\,dx = \\tfrac12$$ — 答案是 ½ (one half) 👍🏽",
]

PAIR_KEYS = {"source", "target", "n_texts", "n_words", "src_to_aligned_mae", "src_to_aligned_max",
             "prefix_leak_max", "residual_abs_max"}


def _run(args: list[str]):
    return runner.invoke(app, ["thl-check", *args])


def _cross_args() -> list[str]:
    args = ["--cross", "--json"]
    for name in THL_TOKENIZERS:
        args += ["--source", name]
    for name in THL_TOKENIZERS:
        args += ["--target", name]
    return args


def _check_acceptance(rows: list[dict], n_texts: int) -> None:
    assert len(rows) == 36
    assert {(r["source"], r["target"]) for r in rows} == {(s, t) for s in THL_TOKENIZERS for t in THL_TOKENIZERS}
    for r in rows:
        assert PAIR_KEYS <= set(r), r
        assert r["n_texts"] == n_texts and r["n_words"] > 0
        assert r["src_to_aligned_max"] <= 1e-4 and r["prefix_leak_max"] <= 1e-3, r
        assert np.isfinite(r["residual_abs_max"])
        if r["source"] == r["target"]:
            assert r["src_to_aligned_max"] == 0 and r["src_to_aligned_mae"] == 0 and r["prefix_leak_max"] == 0, r


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_acceptance_all_36_pairs_on_the_builtin_corpus() -> None:
    result = _run(_cross_args())
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["pairs"]
    _check_acceptance(rows, len(builtin_corpus()))
    # Merged units are reported, and no pair degenerates into one giant unit.
    assert all(r["max_unit_chars"] < 200 for r in rows)


@pytest.mark.slow  # over 2 s: 36 pairs, each tokenizer loaded by the CLI
def test_acceptance_all_36_pairs_on_mixed_text(tmp_path: Path) -> None:
    texts = tmp_path / "mixed.jsonl"
    texts.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in MIXED), encoding="utf-8")
    result = _run(_cross_args() + ["--texts", str(texts)])
    assert result.exit_code == 0, result.output
    _check_acceptance(json.loads(result.stdout)["pairs"], len(MIXED))


@pytest.mark.slow
def test_table_output_and_extra_diagnostics() -> None:
    result = _run(["--source", "qwen3", "--target", "phi3", "--cjk", "--long-context", "--long-lengths", "256,512",
                   "--long-n", "2"])
    assert result.exit_code == 0, result.output
    assert "THL conservation" in result.output and "Long-context" in result.output and "qwen3" in result.output
    result = _run(["--source", "qwen3", "--target", "phi3", "--cjk", "--long-context", "--long-lengths", "256,512",
                   "--long-n", "2", "--json"])
    data = json.loads(result.stdout)
    long_rows = data["long_context"]
    assert [r["target_length"] for r in long_rows] == [256, 512]
    for r in long_rows:
        assert r["thl_rel_mae_pct"] < 1.0 < 50.0 < r["naive_rel_mae_pct"], r
    cjk = {r["family"]: r for r in data["cjk"]}
    assert cjk["cjk"]["word_rel_mae_pct"] > 10 * max(cjk["cjk"]["auto_rel_mae_pct"], 0.1)
    assert cjk["western"]["auto_rel_mae_pct"] == pytest.approx(cjk["western"]["word_rel_mae_pct"])


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_threshold_violation_exits_non_zero() -> None:
    result = _run(["--source", "qwen3", "--target", "phi3", "--max-word-err", "0", "--json"])
    assert result.exit_code == 1
    assert "qwen3 -> phi3" in result.output and "src_to_aligned_max" in result.output


@pytest.mark.parametrize(
    "args,code,message",
    [
        (["--source", "qwen-3"], 2, "unknown tokenizer 'qwen-3'"),
        (["--texts", "/nonexistent/texts.jsonl"], 2, "does not exist"),
        (["--units", "words"], 2, "--units 'words'"),
        (["--source", "gpt2", "--source", "phi3", "--target", "gpt2", "--target", "phi3", "--target", "qwen3"], 2,
         "2 --source and 3 --target"),
        (["--long-context", "--long-lengths", "a,b"], 2, "--long-lengths"),
    ],
)
def test_bad_cli_input_is_a_clear_error(args, code, message) -> None:
    result = _run(args)
    assert result.exit_code == code, result.output
    assert message in " ".join(result.output.split())


def test_malformed_texts_file_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"txt": "no"}\n', encoding="utf-8")
    result = _run(["--texts", str(bad)])
    assert result.exit_code == 2 and "line 2" in result.output
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"text": ""}\n', encoding="utf-8")
    result = _run(["--texts", str(empty), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pairs"][0]["n_words"] == 0


def _tiny_model(tmp_path: Path, tokenizers: dict, name: str, seed: int) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tokenizers[name]
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024)
    folder = tmp_path / f"tiny-{name}"
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_model_scored_check_with_tiny_models(tmp_path: Path, thl_tokenizers: dict) -> None:
    src, tgt = _tiny_model(tmp_path, thl_tokenizers, "gpt2", 0), _tiny_model(tmp_path, thl_tokenizers, "mistral-sp", 1)
    texts = tmp_path / "t.jsonl"
    texts.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in builtin_corpus()[:10]))
    result = _run(["--source-model", src, "--target-model", tgt, "--texts", str(texts), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    row = data["pairs"][0]
    assert row["source"] == src and row["target"] == tgt
    assert row["src_to_aligned_max"] <= 1e-4 and row["aligned_to_target_mae"] > 0
    ratios = {r["denominator"]: r for r in data["ratios"]}
    assert set(ratios) == {"thl_aligned", "shuffled_prompt", "broken_alignment"}
    for r in ratios.values():
        assert r["n_responses"] == 10 and 0 <= r["token_clip_rate"] <= 1 and np.isfinite(r["token_ratio_p99"])
    # A tokenizer larger than the model's embedding table is refused with a clear message.
    result = _run(["--source", "qwen3", "--source-model", src, "--target-model", tgt, "--texts", str(texts)])
    assert result.exit_code == 2 and "embeds only" in " ".join(result.output.split())

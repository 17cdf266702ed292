"""The paper recipes train the paper's objective and check answers the paper's way (issue 16)."""

from __future__ import annotations

import pytest

from mutualrl.cli.main import run

PAPER_POOLS = ["2qwen", "3qwen", "4qwen", "llama-mist", "qwen-phi4"]


@pytest.mark.parametrize("pool", PAPER_POOLS)
def test_pools_show_prints_plain_kl_and_exact_verifier(pool, capsys):
    assert run(["pools", "show", pool]) == 0
    out = capsys.readouterr().out
    assert "use_bias_correction_kl: false" in out
    assert "verifier: exact" in out

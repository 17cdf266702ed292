"""A run piped to a log shows its progress line by line (not only "step 0/N starting" until the final table)."""

from __future__ import annotations

import re

import pytest

from e2e_helpers import assert_ok, tiny_regime_run


@pytest.mark.slow
def test_piped_run_prints_a_line_for_every_step_of_every_policy(tmp_path_factory):
    _, done = tiny_regime_run(tmp_path_factory, "xgrpo")  # 2 steps; stdout is a pipe, as in a cluster log
    assert_ok(done)
    for policy in ("tiny-bpe", "tiny-sp"):
        steps = {int(m) for m in re.findall(rf"{policy}: step (\d+)/2", done.stdout)}
        assert steps >= {1, 2}, done.stdout[-3000:]

"""benchmarks/walks.py keeps measuring: its anchors are reached in this tree, and its counts add up."""

from __future__ import annotations

import pytest

from bench_helpers import load_benchmark


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_the_walks_reach_their_anchors_in_this_tree():
    walks = load_benchmark("walks")
    result = walks.measure(None)  # exits naming an anchor a renamed function left behind
    walk1 = result["walk1"]
    assert walk1["representations"] == len(walks.REPRESENTATIONS)
    assert walk1["files"] == len(walk1["file_names"]) and walk1["types"] == len(walk1["type_names"])
    assert {"training/trainer.py", "see/exchange.py", "regimes/sgt/adapter.py", "thl/retokenize.py"} <= set(
        walk1["file_names"])
    assert walk1["lines"] > walk1["functions"] > walk1["files"]
    assert result["walk2"]["files"] == len(walks.WALK2)  # this tree has the one merge

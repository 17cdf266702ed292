"""The xdist grouping (tests/conftest.py) covers every test file that reads a shared run or rendezvous on the
recipe's fixed port: a new such file left out would launch its shared runs twice or collide on the port."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import SHARED_RUN_FILES, xdist_group_of

TESTS = Path(__file__).parent
NEEDS_THE_SHARED_GROUP = re.compile(r"\b(shared_train|tiny_regime_run)\(|launch\.(cpu_processes=[2-9]|deepspeed=zero)")


def files_needing_the_shared_group() -> set[str]:
    """End-to-end test files (a ``slow`` mark) that read a shared run or launch several ranks / DeepSpeed."""
    return {path.name for path in TESTS.glob("test_*.py")
            if "mark.slow" in (text := path.read_text()) and NEEDS_THE_SHARED_GROUP.search(text)}


def test_every_file_with_a_shared_run_or_several_ranks_is_in_the_shared_group():
    needed = files_needing_the_shared_group()
    assert {"test_multirank_cpu.py", "test_train_e2e.py"} <= needed  # the scan finds what it looks for
    assert needed - {"test_xdist_groups.py"} <= SHARED_RUN_FILES, needed - SHARED_RUN_FILES


def test_groups():
    assert xdist_group_of(TESTS / "test_train_e2e.py", slow=False) == "shared-runs"
    assert xdist_group_of(TESTS / "test_chaos.py", slow=True) == "e2e:test_chaos.py"
    assert xdist_group_of(TESTS / "test_config.py", slow=False) is None

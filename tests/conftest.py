"""Test-session wiring: how end-to-end tests are spread over pytest-xdist's workers (``-n 2``).

The README's test command runs two workers (the box has 2 cores; an end-to-end test keeps ~1.4 of them
busy, a fast test one). Under ``--dist loadgroup`` the tests of one ``xdist_group`` run one after another
on one worker:

- every test that reads a shared session run (:func:`e2e_helpers.shared_train`) is in one group, so each
  shared run is launched once, not once per worker; the multi-rank and DeepSpeed runs are among them
  (they also take free ports, :func:`e2e_helpers.free_ports`, rather than the recipe's fixed one);
- every other end-to-end test is grouped by its file (a file's tests often build one fixture);
- the fast tests are spread one by one.

Without xdist (``-p no:xdist``, or no ``-n``) the marks do nothing and everything runs in order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_RUN_FILES = frozenset({
    "test_async_exchange_e2e.py", "test_learning_bench.py", "test_multirank_cpu.py", "test_progress_log.py",
    "test_trackers_e2e.py", "test_train_e2e.py", "test_vllm_cpu.py",
})
"""Files whose tests read :func:`e2e_helpers.shared_train` runs or launch several CPU ranks or DeepSpeed."""


def xdist_group_of(path: Path, slow: bool) -> str | None:
    """The xdist group a test of file ``path`` belongs to (None: spread freely)."""
    if path.name in SHARED_RUN_FILES:
        return "shared-runs"
    return f"e2e:{path.name}" if slow else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = xdist_group_of(Path(str(item.fspath)), slow=item.get_closest_marker("slow") is not None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))

"""pytest plugin of ``benchmarks/suite_timeline.py``: each test's start and end (wall clock) and the xdist worker that
ran it, one JSON line per test appended to ``$SUITE_TIMELINE_LOG``; one line per process as its session starts."""

from __future__ import annotations

import json
import os
import time

import pytest

LOG_ENV = "SUITE_TIMELINE_LOG"


def _worker(config: pytest.Config) -> str:
    """The xdist worker's id (``gw0``...), else ``main``: from pytest's config, not the environment, where an inner
    pytest started by a test would find its parent's ``PYTEST_XDIST_WORKER``."""
    return getattr(config, "workerinput", {}).get("workerid", "main")


def _write(row: dict) -> None:
    with open(os.environ[LOG_ENV], "a") as log:  # appends of one short line: whole lines from every worker
        log.write(json.dumps(row) + "\n")


def pytest_sessionstart(session: pytest.Session) -> None:
    _write({"worker": _worker(session.config), "session_start": time.time()})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    start = time.time()
    yield
    _write({"worker": _worker(item.config), "test": item.nodeid, "start": start, "end": time.time()})

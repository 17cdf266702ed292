"""A worker imports torch, transformers and TRL with the garbage collector paused, then turns it back on."""

from __future__ import annotations

import gc

import pytest

from mutualrl.host.process_start import collector_paused_for_imports, imports_done
from mutualrl.training import worker


@pytest.fixture
def collector_restored():
    """Whatever a test leaves, the collector is on (what the session froze stays frozen: conftest.py)."""
    yield
    gc.enable()


def test_paused_for_the_imports_then_on_with_the_imports_frozen(collector_restored):
    frozen = gc.get_freeze_count()
    with collector_paused_for_imports():
        assert not gc.isenabled()
        imported = [object() for _ in range(10)]  # stands for the imported modules
        imports_done()
        assert gc.isenabled() and gc.get_freeze_count() > frozen
        assert imported
    assert gc.isenabled()


def test_an_error_before_the_imports_finished_leaves_the_collector_on_and_nothing_frozen(collector_restored):
    frozen = gc.get_freeze_count()
    with pytest.raises(RuntimeError), collector_paused_for_imports():
        raise RuntimeError("import failed")
    # nothing newly frozen; frozen objects another thread of this test process frees meanwhile may lower the count
    assert gc.isenabled() and gc.get_freeze_count() <= frozen


def test_the_worker_runs_its_policy_with_the_collector_paused_and_leaves_it_on(tmp_path, monkeypatch,
                                                                               collector_restored):
    seen = []
    monkeypatch.setattr(worker, "run_policy", lambda *args: seen.append(gc.isenabled()))
    assert worker.main(["--run-dir", str(tmp_path), "--policy", "a"]) == 0
    assert seen == [False] and gc.isenabled()

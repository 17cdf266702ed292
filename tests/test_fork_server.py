"""The suite's fork server (tests/fork_server/zygotes/): the child is the process
``subprocess.Popen([python, "-m", MODULE, ...], env=..., cwd=..., stdout=log, stderr=STDOUT, stdin=DEVNULL,
start_new_session=True)`` would have started, its end is reported as Popen reports it, and only a worker whose
environment matches the zygote's (but for runtime-only variables) is forked. The zygote runs ``tests/fork_probe.py``
here, which prints what it sees; the end-to-end tests not marked ``user_start`` run their CPU workers the same way,
plugged into the launcher's one seam (``worker_process.start_worker_process``) by ``tests/fork_server/sitecustomize.py``,
and only from a folder no other user can write."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from zygotes import child as forked_child
from zygotes import start as forked_start
from zygotes.start import (
    FORK_SERVER_ENV,
    SITE,
    ForkedProcess,
    environment_key,
    forkable,
    plug_into,
    private_folder,
    request_fork,
    start_forked,
    start_zygote,
    uses_vllm,
)

TESTS = Path(__file__).parent


def probe_env(**extra: str) -> dict[str, str]:
    """This environment as the launcher gives a one-thread CPU worker (with more, torch's import starts OpenMP's
    threads and the zygote refuses to fork: ``test_a_zygote_whose_imports_start_threads_refuses``)."""
    env = {k: v for k, v in os.environ.items() if k != FORK_SERVER_ENV}
    return {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PROBE": "one", **extra}


def wait_for_zygote(folder: Path, key: str) -> Path:
    sock = folder / f"{key}.sock"
    deadline = time.monotonic() + 120
    while not sock.exists() and not (folder / f"{key}.failed").exists():
        assert time.monotonic() < deadline, (folder / f"{key}.log").read_text()
        time.sleep(0.2)
    return sock


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    """A zygote for :func:`probe_env`, started as a launcher starts one."""
    folder = tmp_path_factory.mktemp("zygotes")
    env = probe_env()
    key = environment_key(sys.executable, env)
    start_zygote(folder, key, sys.executable, env)
    sock = wait_for_zygote(folder, key)
    assert sock.exists() and not (folder / f"{key}.starting").exists(), (folder / f"{key}.log").read_text()
    yield sock
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()  # the zygote leaves when its folder is gone


def probe(sock: Path, log: Path, *args: str, **env: str) -> ForkedProcess:
    with log.open("ab") as fh:
        process = request_fork(sock, [sys.executable, "-m", "fork_probe", *args], probe_env(**env), str(TESTS),
                               fh.fileno())
    assert process is not None
    return process


def reports(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_the_child_is_what_python_m_would_start(zygote, tmp_path):
    log = tmp_path / "probe.log"
    process = probe(zygote, log, "exit", "3", MUTUALRL_PROBE="runtime value")
    assert process.wait(timeout=60) == 3 and process.returncode == 3 and process.poll() == 3
    (seen,) = reports(log)
    assert seen["pid"] == process.pid and seen["sid"] == process.pid  # its own session, as start_new_session
    assert seen["cwd"] == str(TESTS) and seen["argv"] == ["exit", "3"] and seen["name"] == "__main__"
    assert seen["probe"] == "one" and seen["runtime"] == "runtime value"  # the request's environment
    assert seen["forked"] and seen["torch_imported"] and seen["vllm_blocked"]  # imported once, in the zygote
    assert seen["stdin"] == "" and seen["umask"] == forked_start.current_umask()
    assert seen["path"][0] == str(TESTS)  # as `python -m` puts the working directory first
    ignored_here = [int(s) for s in (signal.SIGINT, signal.SIGUSR1, signal.SIGTERM)
                    if signal.getsignal(s) is signal.SIG_IGN]  # a suite started with `&` ignores SIGINT
    assert seen["ignored"] == ignored_here and seen["python_sigint"] == (signal.SIGINT not in ignored_here)


@pytest.mark.slow
def test_a_signal_the_launcher_ignores_stays_ignored_as_across_exec(zygote, tmp_path):
    before = signal.signal(signal.SIGUSR1, signal.SIG_IGN), signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        process = probe(zygote, tmp_path / "ignored.log", "exit", "0")
    finally:
        signal.signal(signal.SIGUSR1, before[0])
        signal.signal(signal.SIGINT, before[1])
    assert process.wait(timeout=60) == 0
    (seen,) = reports(tmp_path / "ignored.log")
    assert seen["ignored"] == [signal.SIGINT, signal.SIGUSR1] and not seen["python_sigint"]
    assert probe(zygote, tmp_path / "default.log", "exit", "0").wait(timeout=60) == 0  # and not after
    (seen,) = reports(tmp_path / "default.log")
    assert signal.SIGUSR1 not in seen["ignored"]


@pytest.mark.slow
def test_a_child_whose_launcher_gave_up_runs_nothing(zygote, tmp_path):
    connection = forked_start.connect(zygote)
    assert connection is not None
    request = json.dumps({"argv": [sys.executable, "-m", "fork_probe", "exit", "0"], "env": probe_env(),
                          "cwd": str(TESTS), "umask": 0o022, **forked_start.signal_state()}).encode()
    with (tmp_path / "gave-up.log").open("ab") as log:
        socket.send_fds(connection, [len(request).to_bytes(8, "big") + request], [log.fileno()])
    pid = int(forked_start.read_line(connection, 30))
    connection.close()  # gone before saying go: it starts the worker itself, so this one must not run
    deadline = time.monotonic() + 30
    while forked_start.pid_exists(pid):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert (tmp_path / "gave-up.log").read_text() == ""


@pytest.mark.slow
def test_a_pythonpath_of_its_own_is_on_its_path_unless_it_shadows_an_imported_module(zygote, tmp_path):
    extra, shadow = tmp_path / "extra", tmp_path / "shadow"
    extra.mkdir()
    shadow.mkdir()
    (extra / "helper_of_mine.py").write_text("")
    (shadow / "torch.py").write_text("raise SystemExit('the shadowing torch was imported')\n")
    log = tmp_path / "extra.log"
    pythonpath = os.pathsep.join([str(extra), os.environ.get("PYTHONPATH", "")])
    assert probe(zygote, log, "exit", "0", PYTHONPATH=pythonpath).wait(timeout=60) == 0
    (seen,) = reports(log)
    assert seen["forked"] and seen["path"][1] == str(extra) and seen["path"][0] == str(TESTS)
    log = tmp_path / "shadow.log"
    assert probe(zygote, log, "exit", "0", PYTHONPATH=f"{shadow}{os.pathsep}{pythonpath}").wait(timeout=120) == 0
    (seen,) = reports(log)  # it restarted before running the module: a fresh interpreter reports alone
    assert not seen["forked"] and seen["path"][1] == str(shadow) and not seen["torch_imported"]


def test_the_child_s_path_is_the_one_cpython_builds(tmp_path):
    pythonpath = os.pathsep.join(["rel", "/abs", "", str(tmp_path / "x"), ""])
    fresh = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sys.path))"], cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": pythonpath}, capture_output=True, text=True, check=True)
    built = forked_child.python_path_entries(pythonpath, str(tmp_path))
    assert json.loads(fresh.stdout)[1:1 + len(built)] == built == [str(tmp_path / "rel"), "/abs", str(tmp_path),
                                                                   str(tmp_path / "x")]


@pytest.mark.slow
def test_its_end_is_reported_as_popen_reports_it(zygote, tmp_path):
    sleeping = probe(zygote, tmp_path / "sleep.log", "sleep")
    assert sleeping.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        sleeping.wait(timeout=0.3)
    deadline = time.monotonic() + 30
    while not reports(tmp_path / "sleep.log"):  # its report is printed before it sleeps
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(sleeping.pid, signal.SIGTERM)  # as the pool runner stops a policy
    assert sleeping.wait(timeout=30) == -signal.SIGTERM
    failing = probe(zygote, tmp_path / "raise.log", "raise")
    assert failing.wait(timeout=60) == 1
    text = (tmp_path / "raise.log").read_text()
    assert "Traceback" in text and "RuntimeError: the probe failed on purpose" in text  # stderr into the log


@pytest.mark.slow
def test_a_child_restarts_fresh_with_its_pid_and_log(zygote, tmp_path):
    log = tmp_path / "fresh.log"
    process = probe(zygote, log, "fresh")
    assert process.wait(timeout=120) == 0
    forked, fresh = reports(log)
    assert forked["forked"] and not fresh["forked"]
    assert forked["pid"] == fresh["pid"] == process.pid and fresh["argv"] == ["fresh"] and fresh["cwd"] == str(TESTS)
    assert not fresh["vllm_blocked"] and fresh["probe"] == "one"


@pytest.mark.slow
def test_a_zygote_whose_imports_start_threads_refuses(tmp_path):
    env = {**probe_env(), "OMP_NUM_THREADS": "2"}  # torch's import starts OpenMP's pool
    start_zygote(tmp_path, "omp2", sys.executable, env)
    assert not wait_for_zygote(tmp_path, "omp2").exists()
    assert "the imports started threads" in (tmp_path / "omp2.log").read_text()
    start_zygote(tmp_path, "omp2", sys.executable, env)  # refused once: not started again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["omp2.failed", "omp2.log"]


@pytest.mark.slow
def test_the_first_worker_of_an_environment_waits_for_its_zygote_and_is_forked(tmp_path, monkeypatch):
    monkeypatch.setenv(FORK_SERVER_ENV, str(tmp_path))
    worker = [sys.executable, "-m", "mutualrl.training.worker", "--no-such-option"]
    env = probe_env(MUTUALRL_POLICY_START_LOG=str(tmp_path / "started"))  # it trains nothing: not the suite's count
    with (tmp_path / "worker.log").open("ab") as log:
        process = start_forked(worker, env, str(TESTS), log.fileno())
    assert process is not None and process.wait(timeout=60) == 2  # argparse's exit, in the forked worker
    assert "error: the following arguments are required: --run-dir" in (tmp_path / "worker.log").read_text()
    assert (tmp_path / "started").read_text().split() == [str(process.pid), "forked", str(process.pid)]
    key = environment_key(sys.executable, env)
    assert (tmp_path / "starts.log").read_text().splitlines() == [f"forked: zygote {key}"]
    for path in tmp_path.iterdir():
        path.unlink()
    tmp_path.rmdir()  # the zygote leaves when its folder is gone


def test_the_zygote_is_chosen_by_every_variable_a_library_reads_on_import():
    env = {"HF_HOME": "/a", "OMP_NUM_THREADS": "1", "PATH": "/bin"}
    key = environment_key("/py", env)
    runtime = {"MUTUALRL_LAUNCHER_PID": "12", "MASTER_PORT": "auto", "PYTEST_CURRENT_TEST": "t", "MASTER_ADDR": "h",
               "TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "2", "COLUMNS": "120", "PWD": "/x", "_": "y",
               "TORCH_EXTENSIONS_DIR": "/tmp/e", "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    assert environment_key("/py", {**env, **runtime}) == key
    assert environment_key("/py", {**env, "PYTHONPATH": "/src:/tests"}) == key  # the child builds its own sys.path
    for name, value in (("HF_HOME", "/b"), ("OMP_NUM_THREADS", "2"), ("HF_HUB_OFFLINE", "1"), ("MALLOC_ARENA_MAX", "2"),
                        ("TORCHINDUCTOR_CACHE_DIR", "/i")):  # torch._dynamo.package reads that one on import
        assert environment_key("/py", {**env, name: value}) != key, name
    assert environment_key("/other-python", env) != key
    attributes = forked_start.inherited_attributes()
    assert environment_key("/py", env, attributes) == key
    for name, value in (("nice", 19), ("cpus", [0]), ("limits", {}), ("cgroup", "0::/other"), ("oom_score_adj", "900")):
        assert environment_key("/py", env, {**attributes, name: value}) != key, name


def test_only_a_plain_worker_is_forked(tmp_path, monkeypatch):
    worker = [sys.executable, "-m", "mutualrl.training.worker", "--run-dir", "r", "--policy", "p"]
    assert forkable(worker)
    assert not forkable([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", *worker[1:]])
    assert not forkable(["/elsewhere/python", *worker[1:]])
    assert not forkable([sys.executable, "-m", "accelerate.commands.launch", *worker[1:]])
    monkeypatch.delenv(FORK_SERVER_ENV, raising=False)
    assert start_forked(worker, os.environ, str(tmp_path), 1) is None  # no folder: the launcher starts it
    monkeypatch.setenv(FORK_SERVER_ENV, str(tmp_path))
    started = []
    monkeypatch.setattr(forked_start, "start_zygote", lambda *a: started.append(a) or "started it")
    monkeypatch.setattr(forked_start, "ZYGOTE_START_S", 0.2)  # it never listens
    assert start_forked(worker, os.environ, str(tmp_path), 1) is None and len(started) == 1  # first: start one
    assert start_forked(worker[:3] + ["--help"], os.environ, str(tmp_path), 1) is None and len(started) == 2
    assert start_forked(["/bin/true"], os.environ, str(tmp_path), 1) is None and len(started) == 2
    ranks = ["/py", "-m", "torch.distributed.run", "--nproc_per_node", "2", *worker[1:]]
    assert start_forked(ranks, os.environ, str(tmp_path), 1) is None and len(started) == 2
    key = environment_key(sys.executable, os.environ)
    assert (tmp_path / "starts.log").read_text().splitlines() == [  # how each policy's start went, and why
        f"started: no zygote {key}: started it", f"started: no zygote {key}: started it",
        "started: not a plain worker: /py -m torch.distributed.run"]


def test_zygotes_are_started_once_and_only_so_many(tmp_path, monkeypatch):
    spawned = []
    running = SimpleNamespace(poll=lambda: None)
    monkeypatch.setattr(forked_start.subprocess, "Popen", lambda argv, **kw: spawned.append((argv, kw["env"])) or running)
    monkeypatch.setattr(forked_start, "_STARTED", [])
    site = {"PYTHONPATH": str(SITE)}  # the zygote's own modules
    assert "does not hold" in start_zygote(tmp_path, "a", sys.executable, {"HF_HOME": "/h"}) and not spawned
    start_zygote(tmp_path, "a", sys.executable, {"MUTUALRL_LAUNCHER_PID": "1", "HF_HOME": "/h", **site})
    start_zygote(tmp_path, "a", sys.executable, site)  # already starting
    assert len(spawned) == 1 and spawned[0][1] == {"HF_HOME": "/h", **site}  # no runtime-only variable kept
    assert spawned[0][0][-1] == str(tmp_path / "a.sock")
    hooked = tmp_path / "site"
    hooked.mkdir()
    (hooked / "sitecustomize.py").write_text("")  # a benchmark's profiler, say: every child would inherit it
    assert "runs" in start_zygote(tmp_path, "hooked", sys.executable, {"PYTHONPATH": f"{hooked}:{SITE}"})
    assert len(spawned) == 1
    for key in "bcdef":
        start_zygote(tmp_path, key, sys.executable, site)
    assert len(spawned) == forked_start.MAX_ZYGOTES


def test_a_zygote_that_died_before_telling_leaves_the_pid_to_watch():
    ours, theirs = socket.socketpair()
    alive = ForkedProcess(os.getpid(), ours)
    theirs.close()  # the zygote is gone; this process (standing for the worker) still runs
    assert alive.poll() is None and alive.poll() is None
    ended = subprocess.Popen(["true"])
    ended.wait()
    ours, theirs = socket.socketpair()
    gone = ForkedProcess(ended.pid, ours)
    theirs.close()
    assert gone.wait(timeout=5) == 1  # the status is lost: a failure, never a success


def test_a_policy_that_generates_with_vllm_comes_from_a_zygote_that_imported_it(tmp_path, monkeypatch):
    spawned = []
    running = SimpleNamespace(poll=lambda: None)
    monkeypatch.setattr(forked_start.subprocess, "Popen", lambda argv, **kw: spawned.append(argv) or running)
    monkeypatch.setattr(forked_start, "_STARTED", [])
    monkeypatch.setattr(forked_start, "ZYGOTE_START_S", 0.1)
    monkeypatch.setenv(FORK_SERVER_ENV, str(tmp_path))
    worker = [sys.executable, "-m", "mutualrl.training.worker", "--run-dir", "r", "--policy", "p"]
    assert start_forked(worker, probe_env(), str(tmp_path), 1, with_vllm=True) is None  # it never listens here
    assert start_forked(worker, probe_env(), str(tmp_path), 1) is None
    key = environment_key(sys.executable, probe_env())
    assert [argv[3:] for argv in spawned] == [[str(tmp_path / f"{key}-vllm.sock"), "--with-vllm"],
                                              [str(tmp_path / f"{key}.sock")]]


def test_only_a_folder_no_one_else_may_write_is_used(tmp_path, monkeypatch):
    """Another user who made the folder first, or may write into it, would receive the workers' environment (their
    tokens included) at a socket of theirs: such a folder is not used, and the product starts the worker."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert private_folder(str(private)) == private
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o770)
    link = tmp_path / "link"
    link.symlink_to(private)
    for folder in (str(shared), str(link), "relative", "", str(tmp_path / "none")):
        assert private_folder(folder) is None, folder
    monkeypatch.setenv(FORK_SERVER_ENV, str(shared))
    worker = [sys.executable, "-m", "mutualrl.training.worker", "--run-dir", "r", "--policy", "p"]
    monkeypatch.setattr(forked_start, "start_zygote", lambda *a: pytest.fail("a zygote started from a shared folder"))
    assert start_forked(worker, probe_env(), str(tmp_path), 1) is None
    assert list(shared.iterdir()) == []


def test_the_plug_keeps_the_product_s_start_for_every_worker_it_does_not_fork(tmp_path, monkeypatch):
    started = []
    seam = SimpleNamespace(start_worker_process=lambda argv, env, cwd, log: started.append(argv) or "popen")
    product = seam.start_worker_process
    plug_into(seam)
    assert seam.start_worker_process.__wrapped__ is product
    monkeypatch.setenv(FORK_SERVER_ENV, "")  # no folder: nothing forked
    with (tmp_path / "log").open("ab") as log:
        assert seam.start_worker_process(["/bin/true"], {}, None, log) == "popen" and started == [["/bin/true"]]


def test_the_zygote_s_vllm_follows_the_settings_the_worker_reads(tmp_path):
    launch = tmp_path / "run" / "launch"
    launch.mkdir(parents=True)
    (launch / "a.grpo.json").write_text(json.dumps({"use_vllm": True}))
    (launch / "b.grpo.json").write_text(json.dumps({"use_vllm": False}))
    (launch / "c.grpo.json").write_text("[")
    worker = [sys.executable, "-m", "mutualrl.training.worker", "--run-dir", str(tmp_path / "run"), "--policy"]
    assert [uses_vllm([*worker, name]) for name in "abcd"] == [True, False, False, False]
    assert not uses_vllm(worker)


@pytest.mark.parametrize("plugged", [True, False])
def test_the_sitecustomize_plugs_a_launcher_only_where_the_suite_asks(plugged):
    """A process the suite starts imports ``tests/fork_server/sitecustomize.py``; the launcher's seam is replaced
    only where ``MUTUALRL_FORK_SERVER`` is set, and nothing is imported before the seam is."""
    env = {**os.environ, "PYTHONPATH": f"{SITE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           FORK_SERVER_ENV: "/somewhere" if plugged else ""}
    code = ("import sys; before = 'zygotes.start' in sys.modules; "
            "from mutualrl.launch.supervise import worker_process as seam; "
            "print(before, hasattr(seam.start_worker_process, '__wrapped__'))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", str(plugged)], done.stderr


def test_a_user_start_test_runs_the_product_s_start_and_fails_where_a_worker_was_forked(tmp_path, tmp_path_factory,
                                                                                         monkeypatch):
    """``user_start`` (tests/conftest.py): inside, the product's own function and no zygote folder for the processes
    a test starts; a worker that says it was forked fails the test, and its start is still counted."""
    from conftest import started_as_a_user_s
    from mutualrl.launch.supervise import worker_process
    from mutualrl.training.worker import START_LOG_ENV

    session = tmp_path / "starts.log"
    monkeypatch.setenv(START_LOG_ENV, str(session))
    with started_as_a_user_s(tmp_path_factory, "a test"):
        assert not hasattr(worker_process.start_worker_process, "__wrapped__") and not os.environ[FORK_SERVER_ENV]
        Path(os.environ[START_LOG_ENV]).write_text("12\n")
    assert session.read_text() == "12\n" and os.environ[START_LOG_ENV] == str(session)
    with pytest.raises(AssertionError, match=r"a test: workers \['13'\] were forked"):
        with started_as_a_user_s(tmp_path_factory, "a test"):
            Path(os.environ[START_LOG_ENV]).write_text("13 forked\n13\n")
    assert session.read_text() == "12\n13 forked\n13\n"

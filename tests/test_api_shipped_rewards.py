"""The Python API takes reward functions from a notebook (issue 49, item 9): a lambda, a closure, a function of
``__main__`` is shipped to the workers by value (cloudpickle); a worker unpickles only bytes whose sha256 its
launcher gave it in its environment, so a run folder never supplies code: eval and resume of such a run need the
function passed again. Only what cannot be pickled is refused, saying why."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from e2e_helpers import child_env
from mutualrl.api import reward_func_path
from mutualrl.errors import DataError, UsageError
from mutualrl.tasks import shipped_rewards
from mutualrl.tasks.reward_funcs import resolve_reward_func


def make_threshold(limit: float):
    def above(completions, **kwargs):
        return [1.0 if len(str(c)) > limit else 0.0 for c in completions]

    return above


@pytest.fixture()
def worker_view(monkeypatch: pytest.MonkeyPatch) -> dict:
    """What a worker process has: none of the launcher's functions in memory (only its environment)."""
    shipped: dict = {}
    monkeypatch.setattr(shipped_rewards, "_SHIPPED", shipped)
    monkeypatch.delenv(shipped_rewards.SHIPPED_ENV, raising=False)
    return shipped


def test_lambdas_closures_and_main_functions_are_shipped_by_value(worker_view: dict) -> None:
    closure = make_threshold(2)
    name = reward_func_path(closure)
    assert name.startswith("by-value:above:") and len(shipped_rewards.digest_of(name)) == 64
    assert resolve_reward_func(name) is closure  # the launcher's process uses its own function
    lam = reward_func_path(lambda completions, **kw: [0.0] * len(completions))
    assert lam.startswith("by-value:lambda:")
    main_fn = type(make_threshold)(make_threshold(1).__code__, {}, "in_notebook", None, make_threshold(1).__closure__)
    main_fn.__module__ = "__main__"
    assert reward_func_path(main_fn).startswith("by-value:in_notebook:")
    assert reward_func_path("my_rewards.exact") == "my_rewards.exact"  # an import path stays one


def test_what_cannot_be_pickled_is_refused_naming_why() -> None:
    lock = threading.Lock()

    def guarded(completions, **kwargs):
        with lock:
            return [0.0] * len(completions)

    with pytest.raises(UsageError, match=r"cannot be shipped to the policy processes by value \(TypeError: cannot "
                                         r"pickle '_thread.lock' object\).*my_rewards.py"):
        reward_func_path(guarded)


def loads_in_a_new_process(data: bytes, call: str) -> str:
    """What ``call`` (Python, on the unpickled function ``f``) prints in a new process that has only this
    working directory and the environment a worker has: none of this session's sys.path additions."""
    code = f"import sys, cloudpickle\nf = cloudpickle.loads(sys.stdin.buffer.read())\nprint({call})"
    done = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, env=child_env(),
                          timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout.decode().strip()


def test_a_module_only_this_session_put_on_sys_path_is_shipped_by_value(tmp_path: Path, worker_view: dict,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A notebook's ``sys.path.insert(0, "helpers")`` then ``import zrew``: the workers (a new process in the same
    working directory) cannot import zrew, so passing ``zrew.exact`` by its path failed in every worker."""
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "zrew_helpers.py").write_text("def strip(text):\n    return str(text).strip()\n")
    (helpers / "zrew.py").write_text("import zrew_helpers\n\ndef exact(completions, answer, **kwargs):\n"
                                     "    return [float(zrew_helpers.strip(c) == a) for c, a in zip(completions, answer)]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(helpers))
    import zrew  # noqa: PLC0415 - only importable once the test put its folder on sys.path

    name = reward_func_path(zrew.exact)
    assert name.startswith("by-value:exact:"), name
    data = worker_view[shipped_rewards.digest_of(name)][1]
    assert loads_in_a_new_process(data, "f(completions=[' 4', '5'], answer=['4', '4'])") == "[1.0, 0.0]"

    def in_notebook(completions, **kwargs):  # a closure of this session calling the helper module
        return [float(zrew_helpers_module.strip(c) == "4") for c in completions]

    zrew_helpers_module = sys.modules["zrew_helpers"]
    data = worker_view[shipped_rewards.digest_of(reward_func_path(in_notebook))][1]
    assert loads_in_a_new_process(data, "f(completions=['4 '])") == "[1.0]"


def test_a_closure_using_a_module_of_the_working_directory_loads_in_a_safe_path_worker(
        tmp_path: Path, worker_view: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """A notebook run from the folder holding ``zrew_cwd_helpers.py``: its closure calls that module. A worker runs
    in safe-path mode (``PYTHONSAFEPATH``), where unpickling finds nothing in the working directory: the module goes
    by value (the launcher's probe was a process that had the working directory on its path, and every worker then
    failed with ModuleNotFoundError)."""
    (tmp_path / "zrew_cwd_helpers.py").write_text("def strip(text):\n    return str(text).strip()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import zrew_cwd_helpers  # noqa: PLC0415 - importable here as from a notebook's working directory

    def in_notebook(completions, **kwargs):
        return [float(zrew_cwd_helpers.strip(c) == "4") for c in completions]

    data = worker_view[shipped_rewards.digest_of(reward_func_path(in_notebook))][1]
    code = "import sys, cloudpickle\nf = cloudpickle.loads(sys.stdin.buffer.read())\nprint(f(completions=['4 ']))"
    done = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, timeout=120,
                          env={**child_env(), "PYTHONSAFEPATH": "1"})
    assert done.returncode == 0 and done.stdout.decode().strip() == "[1.0]", done.stderr.decode()[-2000:]


def test_a_module_the_workers_import_is_named_by_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "zrew_cwd.py").write_text("def exact(completions, **kwargs):\n    return [0.0] * len(completions)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import zrew_cwd  # noqa: PLC0415

    assert reward_func_path(zrew_cwd.exact) == "zrew_cwd.exact"  # the working directory: the workers' too


def test_a_worker_loads_only_the_bytes_its_launcher_wrote(tmp_path: Path, worker_view: dict,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    name = reward_func_path(make_threshold(3))  # the launcher's process
    folder = tmp_path / "launch" / "rewards"
    shipped_rewards.write_shipped([name], folder)
    files = shipped_rewards.shipped_files([name], folder)
    sha = shipped_rewards.digest_of(name)
    assert hashlib.sha256((folder / f"{sha}.pkl").read_bytes()).hexdigest() == sha
    worker_view.clear()  # now a worker: nothing in memory

    with pytest.raises(UsageError, match="never loads code from a run folder: pass the function again"):
        resolve_reward_func(name)  # eval or resume from the folder: the launcher named no file
    monkeypatch.setenv(shipped_rewards.SHIPPED_ENV, json.dumps(files))
    loaded = resolve_reward_func(name)
    assert loaded(completions=["ab", "abcd"]) == [0.0, 1.0]  # the closure's captured limit came along

    import cloudpickle

    (folder / f"{sha}.pkl").write_bytes(cloudpickle.dumps(make_threshold(0)))  # replaced in the run folder
    with pytest.raises(DataError, match="not the reward function the launcher wrote .*nothing unpickled"):
        resolve_reward_func(name)
    other = "by-value:above:" + "0" * 64  # a name edited in config.yaml: its digest was never given
    with pytest.raises(UsageError, match="pass the function again"):
        resolve_reward_func(other)


SCRIPT = '''
import json, sys
import mutualrl

LOG = {log!r}
seen = {{"n": 0}}

def make_reward(bonus):
    def scored(prompts, completions, answer, **kwargs):  # a closure over bonus and LOG, defined in __main__
        with open(LOG, "a") as fh:
            fh.write(json.dumps({{"policy": sys.argv[sys.argv.index("--policy") + 1] if "--policy" in sys.argv
                                  else None}}) + "\\n")
        return [bonus if str(c).strip().startswith(str(a)) else 0.0 for c, a in zip(completions, answer)]
    return scored

reward = make_reward(1.0)
settings = {{"task.name": "dataset", "task.source": {data!r}, "validation.limit": 4, "validation.every_steps": 0,
            "validation.batch_size": 4}}
result = mutualrl.train("tiny", regime="sgt", max_steps=1, output_dir={run!r}, progress=False, overrides=settings,
                        reward_funcs=[reward, lambda completions, **kw: [0.0] * len(completions)])
print("MODELS", sorted(result.models))
again = mutualrl.evaluate(result.run_dir, progress=False, reward_funcs=[reward])  # nothing read from the folder
print("EVAL", sorted(again["reward@1"]), again["meta"]["verifier"].startswith("by-value:scored:"))
'''


@pytest.mark.slow
def test_a_closure_from_a_script_trains_the_tiny_pool_and_a_new_process_needs_it_again(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    for split, count in (("train", 16), ("test", 4)):
        rows = [{"prompt": f"{i % 7}+{i % 5}+1=", "answer": i % 7 + i % 5 + 1} for i in range(count)]
        (tmp_path / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    log, run = tmp_path / "calls.jsonl", tmp_path / "run"
    (tmp_path / "notebook.py").write_text(SCRIPT.format(log=str(log), data=str(tmp_path / "data"), run=str(run)))
    done = subprocess.run([sys.executable, "notebook.py"], cwd=tmp_path, env=child_env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "MODELS ['tiny-bpe', 'tiny-sp']" in done.stdout
    assert {json.loads(line)["policy"] for line in log.read_text().splitlines()} >= {"tiny-bpe", "tiny-sp"}
    assert "EVAL ['tiny-bpe/final', 'tiny-sp/final'] True" in done.stdout
    assert len(list((run / "launch" / "rewards").glob("*.pkl"))) == 2

    evaluated = subprocess.run([sys.executable, "-m", "mutualrl", "eval", str(run), "-o", "ev.json"], cwd=tmp_path,
                               env=child_env(), capture_output=True, text=True, timeout=600)
    assert evaluated.returncode != 0 and "pass the function again" in evaluated.stdout + evaluated.stderr
    assert not (tmp_path / "ev.json").exists()
    resumed = subprocess.run([sys.executable, "-m", "mutualrl", "train", "--resume", "--max-steps", "2", "-o",
                              str(run)], cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=600)
    assert resumed.returncode != 0 and "pass the function again" in resumed.stdout + resumed.stderr

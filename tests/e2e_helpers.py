"""Helpers for end-to-end tests: recipes over a pool of model folders (conftest's ``random_lm_pair``), the
``mutualrl train`` command and its environment, free ports, and the runs shared by a test session."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def write_recipe(path: Path, models: dict[str, Path], regime: str = "xgrpo", steps: int = 3,
                 extra: dict[str, Any] | None = None) -> Path:
    """A small recipe over ``models`` ({policy name: model folder}) on the synthetic task."""
    recipe: dict[str, Any] = {
        "pool": {"name": "e2e", "description": "two tiny random policies",
                 "policies": [{"name": name, "model": str(folder)} for name, folder in models.items()]},
        "regime": {"name": regime},
        "task": {"name": "synthetic-arith", "max_prompt_tokens": 64, "train_limit": 160},
        "grpo": {"learning_rate": 1e-3, "num_generations": 4, "per_device_train_batch_size": 8,
                 "max_completion_length": 5, "max_steps": steps, "logging_steps": 1, "save_strategy": "no",
                 "seed": 5, "loss_type": "grpo", "report_to": []},
        "validation": {"every_steps": 0, "at_start": True, "limit": 8, "batch_size": 8},
        "see": {"barrier_timeout_s": 120, "retention_steps": None},
    }
    for key, value in (extra or {}).items():
        node = recipe
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    path.write_text(yaml.safe_dump(recipe))
    return path


def train_command(recipe: Path, run_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "mutualrl", "train", "--pool", str(recipe), "-o", str(run_dir), *args]


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive free ports (policy i rendezvouses on ``launch.main_process_port`` + i):
    runs that start several ranks must not share the recipe's default port with another test's run.

    Drawn below the kernel's ephemeral range (``ip_local_port_range``, 32768 and up on Linux): a port found free
    there can be handed, before the run binds it, to any process's outgoing connection or ``bind(0)`` (a worker's
    ``MASTER_PORT=auto``), which is how a CI run once failed with EADDRINUSE."""
    low = ephemeral_range()[0]
    for _ in range(50):
        # The system's entropy, not the `random` module: in-process trainings seed it (transformers' set_seed),
        # after which both xdist workers would draw the same "free" ports in the same order.
        start = random.SystemRandom().randint(20000, max(low - count - 1, 20100))
        try:
            for port in range(start, start + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
            return start
        except OSError:
            continue
    raise RuntimeError("no free ports")


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for ports it picks itself (Linux; 32768-60999 by default elsewhere)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}


def run_train(recipe: Path, run_dir: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(train_command(recipe, run_dir, *args), env=child_env(), capture_output=True, text=True,
                          timeout=timeout)


def metric_lines(run_dir: Path, kind: str = "train") -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [line for line in lines if line.get("kind") == kind]


# ---------------------------------------------------------------------------------------
# Runs shared by tests: one launch per test session, read (never written) by every test that
# needs exactly that run. A launch costs ~15 s of process start-up on 2 cores, whatever it checks.
# ---------------------------------------------------------------------------------------

TINY = ("--pool", "tiny", "--set", "validation.limit=20", "--set", "validation.every_steps=0")
"""The embedded tiny pool, validated at the start and the end on 20 held-out prompts."""

CHECKPOINT_EACH_STEP = ("--set", "grpo.save_steps=1", "--set", "grpo.save_total_limit=3")
"""A checkpoint at every step, each kept (the tiny recipe's: every 100, the plan keeping the last 2): the shared runs
that test_resume_every_regime.py resumes from their ``checkpoint-1`` (a checkpoint more costs its write, a resume
test's run to step 1 a launch)."""

TINY_SGT_3_STEPS = (*TINY, "--regime", "sgt", "--max-steps", "3", *CHECKPOINT_EACH_STEP, "--baseline", "standalone")
"""3 SGT steps, then its standalone baseline in ``<run>-standalone`` (the baseline does not touch the SGT run); each
checkpointed at every step."""

TINY_SGT_3_STEPS_OFF_LOCK_STEP = (*TINY, "--regime", "sgt", "--max-steps", "3", "--set", "see.on_peer_failure=continue",
                                  "--set", "grpo.report_to=[tensorboard]")
"""The same 3 SGT steps through the staleness machinery (S = 0: the exchange logs its age metrics), reporting to
TensorBoard; trains bit-identically to the lock-step run (test_async_exchange_e2e.py)."""

TINY_HACPO_5_STEPS = (*TINY, "--regime", "hacpo", "--max-steps", "5", "--set", "validation.at_start=false",
                      "--set", "validation.every_steps=1")
"""5 HACPO steps validated at each: the run test_train_e2e.py's SIGTERM test stops and resumes, and (shared) the same
run not stopped, the reference of the resumed run's weights and validation rows."""

TINY_REGIMES_2_STEPS = {
    "xgrpo": ("--regime", "xgrpo", "--set", "grpo.report_to=[tensorboard]", *CHECKPOINT_EACH_STEP),
    "prp-peer": ("--regime", "prp", "--set", "regime.prp.denominator=peer", *CHECKPOINT_EACH_STEP),
    "prp-learner": ("--regime", "prp", "--set", "regime.prp.denominator=learner"),
    "grpo-randpert": ("--regime", "grpo-randpert"),
    "opd": ("--regime", "opd", *CHECKPOINT_EACH_STEP),
    "opd-sgt": ("--regime", "opd-sgt", *CHECKPOINT_EACH_STEP),
    "byte-kd": ("--regime", "byte-kd", "--set", "regime.bytekd.rescue_lam=0.3",
                "--set", "regime.bytekd.max_rescues_per_prompt=1",  # with SGT's rescue: its counters are saved
                *CHECKPOINT_EACH_STEP),
}
"""2 steps of each of the other regimes (``TINY + ("--max-steps", "2") + args``); those test_resume_every_regime.py
resumes checkpointed at every step."""

_SHARED: dict[tuple[str, ...], tuple[Path, subprocess.CompletedProcess]] = {}


def shared_train(tmp_path_factory: Any, *args: str) -> tuple[Path, subprocess.CompletedProcess]:
    """``mutualrl train -o RUN *args`` once per session (keyed by ``args``): the run folder and the finished
    process; each caller asserts on the return code itself."""
    if args not in _SHARED:
        run_dir = tmp_path_factory.mktemp("shared-run") / "run"
        env = {k: v for k, v in child_env().items() if not k.startswith("MUTUALRL_DEBUG")}  # no test's throttle
        done = subprocess.run([sys.executable, "-m", "mutualrl", "train", "-o", str(run_dir), *args], env=env,
                              capture_output=True, text=True, timeout=900)
        _SHARED[args] = (run_dir, done)
    return _SHARED[args]


def tiny_regime_run(tmp_path_factory: Any, name: str) -> tuple[Path, subprocess.CompletedProcess]:
    """The shared 2-step tiny run of regime ``name`` (a key of :data:`TINY_REGIMES_2_STEPS`)."""
    return shared_train(tmp_path_factory, *TINY, "--max-steps", "2", *TINY_REGIMES_2_STEPS[name])


def assert_ok(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


HOLD_TINY_SP = '''
import sys
import time
from pathlib import Path

from mutualrl.see.consumption_log import read_consumption

HELD_STEPS = {held_steps}


def hold_tiny_sp(prompts, completions, trainer_state=None, **kwargs):
    """0.0 for every completion (added to the verifier's reward, it changes none). In tiny-sp's ranks at the first
    HELD_STEPS steps it first waits, at most 300 s, until tiny-bpe's rank 0 has logged its choice of the next step:
    tiny-sp's round s is committed only after tiny-bpe chose its round of step s + 1, whatever the box's load."""
    argv = sys.argv
    step = trainer_state.global_step
    if argv[argv.index("--policy") + 1] == "tiny-sp" and step < HELD_STEPS:
        see = Path(argv[argv.index("--run-dir") + 1]) / "see"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not any(r["step"] == step + 1 for r in read_consumption(see, "tiny-bpe")):
            time.sleep(0.2)
    return [0.0] * len(completions)
'''


def hold_tiny_sp(folder: Path, held_steps: int) -> tuple[str, str]:
    """Write ``folder/hold.py`` (:data:`HOLD_TINY_SP`, holding tiny-sp's first ``held_steps`` steps) and return the
    ``--set`` arguments that add it to the task's reward functions; the run must start in ``folder``. A reward
    function that waits orders the two policies by construction, where a sleep made the order depend on the load."""
    (folder / "hold.py").write_text(HOLD_TINY_SP.format(held_steps=held_steps))
    return "--set", "task.reward_funcs=[hold.hold_tiny_sp]"

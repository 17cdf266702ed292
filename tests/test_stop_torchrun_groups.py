"""A scheduler's stop reaches every process of a run: the launcher, each policy's torchrun agent and its ranks.

Slurm's ``scancel --signal=TERM`` and ``#SBATCH --signal=TERM@N`` signal every process of the job step; submitit's
warning before a time limit is SIGUSR2 to every process. A policy of several ranks has torchrun's agent between the
launcher and its ranks (``accelerate launch`` runs the same agent on a GPU node). By default the agent passes a
SIGTERM on and SIGKILLs its ranks 30 s later, and dies at once of a SIGUSR2 (its launcher then takes the policy for
failed): the save of the step in flight was lost either way. Here each policy is a torchrun group of 2 CPU ranks,
each save takes :data:`SAVE_S`, one policy's processes get SIGTERM and the other's SIGUSR2 (the
launcher SIGTERM): both policies must leave the checkpoint of the step in flight. torch's agent reads its wait from
``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` (30 s when unset): the test's environment sets it to :data:`AGENT_DEFAULT_S`, so a
save of :data:`SAVE_S` outlasts the agent's own wait unless mutualrl's plan sets a longer one for the policy
(``stop_request.rank_agent_env``), as it must, whatever the launcher's environment says.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from e2e_helpers import TINY, child_env, free_ports
from mutualrl import fault_injection
from mutualrl.ops.checkpoint_files import MANIFEST_NAME, checkpoint_problem

POLICIES = ("tiny-bpe", "tiny-sp")
SIGNAL_OF = {"tiny-bpe": signal.SIGTERM, "tiny-sp": signal.SIGUSR2}
AGENT_DEFAULT_S = 2
"""The agent's wait after passing a signal on before it SIGKILLs its ranks, where mutualrl did not set one: torch's
default (30 s) shortened for the test, so that the save need not outlast 30 s to show a plan that leaves it."""
SAVE_S = 8
"""Longer than :data:`AGENT_DEFAULT_S` (a save the agent's own wait cuts short leaves no manifest) and than
:data:`AGENT_ALIVE_S` (an agent dead of SIGUSR2 is seen dead before its ranks' save ends)."""


AGENT_ALIVE_S = 3
"""How long after the signals each agent must still be alive: well within the ranks' save (:data:`SAVE_S`), which
load only lengthens (the step in flight ends first)."""


def logged_steps(run_dir, policy: str) -> list[int]:
    path = run_dir / "metrics" / f"{policy}.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return [row["step"] for row in rows if row.get("kind") == "train"]


def signal_every_process(launcher: subprocess.Popen) -> tuple[dict[str, list[int]], dict[str, psutil.Process]]:
    """As Slurm does: every process of the run, the launcher last; a policy's agent and ranks get its signal of
    :data:`SIGNAL_OF` (their command line names the policy). Returns the pids signalled per policy, and each
    policy's torchrun agent (its process whose parent is no process of the policy)."""
    members: dict[str, list[psutil.Process]] = {policy: [] for policy in POLICIES}
    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            command = " ".join(child.cmdline())
            members[next(p for p in POLICIES if f"--policy {p}" in command)].append(child)
        except (psutil.NoSuchProcess, StopIteration):
            continue
    pids = {policy: {process.pid for process in processes} for policy, processes in members.items()}
    agents = {policy: process for policy, processes in members.items() for process in processes
              if process.ppid() not in pids[policy]}
    signalled: dict[str, list[int]] = {policy: [] for policy in POLICIES}
    for policy, processes in members.items():
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(SIGNAL_OF[policy])
                signalled[policy].append(process.pid)
    launcher.send_signal(signal.SIGTERM)
    return signalled, agents


def alive(process: psutil.Process) -> bool:
    """Running, and not a zombie its parent has yet to reap (a process dead of a signal it did not handle)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_term_and_usr2_to_every_process_of_torchrun_groups_save_the_step_in_flight(tmp_path):
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "mutualrl", "train", *TINY, "--regime", "sgt", "--max-steps", "30",
               "-o", str(run_dir), "--set", "validation.at_start=false", "--set", "launch.cpu_processes=2",
               "--set", f"launch.main_process_port={free_ports(2)}"]
    env = {**child_env(), fault_injection.SAVE_DELAY_ENV: ",".join(f"{p}={SAVE_S}" for p in POLICIES),
           "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(AGENT_DEFAULT_S)}
    launcher = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    while not all(logged_steps(run_dir, p) for p in POLICIES):
        assert launcher.poll() is None, launcher.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "no policy logged a step in 600 s"
        time.sleep(0.2)
    signalled, agents = signal_every_process(launcher)
    # each policy: its agent and 2 ranks (torchrun starts each rank in a session of its own)
    assert all(len(pids) >= 3 for pids in signalled.values()), signalled
    # Each agent waits for its ranks' saves (SAVE_S) instead of ending: one that does not handle a signal (torch's
    # default list has no SIGUSR2) dies of it at once, and under accelerate launch its policy is taken for failed.
    time.sleep(AGENT_ALIVE_S)
    assert {p: alive(a) for p, a in agents.items()} == {p: True for p in POLICIES}, agents
    out, _ = launcher.communicate(timeout=600)
    assert launcher.returncode == 130, out[-3000:]
    saved = json.loads((run_dir / "run.json").read_text())
    assert saved["status"] == "interrupted", saved
    for policy in POLICIES:
        done = max(logged_steps(run_dir, policy))
        checkpoints = sorted((run_dir / "policies" / policy).glob("checkpoint-*"))
        # the tiny pool checkpoints every 100 steps: any checkpoint is the stop's, at the step in flight or past it
        assert checkpoints, f"{policy}: no checkpoint after the stop\n{out[-3000:]}"
        # the manifest is written after the save's delay: a rank killed in the save leaves the other files only
        assert all((c / MANIFEST_NAME).is_file() for c in checkpoints), (policy, checkpoints, out[-3000:])
        assert all(checkpoint_problem(c) is None for c in checkpoints), [checkpoint_problem(c) for c in checkpoints]
        assert int(checkpoints[-1].name.split("-")[1]) >= done >= 1, (policy, checkpoints, done)

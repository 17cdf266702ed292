"""Run the policy processes of a pool: start, watch, show progress, stop cleanly on failure.

The parent of ``mutualrl train`` only plans, launches, watches and reports. Each policy is its own process group (a subprocess on CPU, an ``accelerate
launch`` group on GPUs). The runner

- starts every group with its environment (:func:`.worker_process.start_worker_process`) and sends its output
  to ``RUN/logs/<policy>.log``;
- shows one live progress line per policy (step, reward, regime metric, phase) from the
  status files the policy processes keep current;
- merges the per-policy metric files into the run's merged metrics as they grow (one writer);
- when a policy exits non-zero or stalls, writes its failure marker into the SEE (so peers'
  barriers stop waiting at once and name it), gives the others a grace period to exit on
  their own, then terminates whatever is left, and reports which policy failed and why.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from mutualrl.atomic_io import write_text_atomic
from mutualrl.errors import RunFolderError, StorageError
from mutualrl.launch.rundir.metrics_merge import MetricsMerger
from mutualrl.launch.supervise import worker_process
from mutualrl.launch.supervise.progress import PoolProgress
from mutualrl.launch.supervise.progress_display import PolicyRows, StepClock, progress_display, source_details
from mutualrl.launch.supervise.signals import interrupt_requested, raise_if_interrupted
from mutualrl.launch.supervise.stop_grace import SAVE_WAIT_CAP_S, StepTimes, StopBudget, still_saving
from mutualrl.launch.supervise.worker_output import (
    describe_exit,
    file_marks,
    in_reward_function,
    spawn_dir,
    stop_reason,
    storage_reason,
    tail,
    unfinished_exit,
)
from mutualrl.regimes.core.registry import all_regimes
from mutualrl.run_folder import RunPaths, read_status, see_marker
from mutualrl.training.stop_request import clear_request, follow_stop, request_stop, request_teardown
from mutualrl.ops.watchdog import LAUNCHER_PID_ENV
from mutualrl.write_failures import is_storage_message


@dataclass
class PolicyProcess:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    cwd: Path | None = None
    popen: worker_process.WorkerProcess | None = None
    returncode: int | None = None
    last_step: int = -1
    marks: tuple[Any, ...] = ()  # its progress files as they were when it started (worker_output.file_marks)


@dataclass
class RunOutcome:
    ok: bool
    returncodes: dict[str, int | None]
    failed_policy: str | None = None
    reason: str = ""
    log_tail: str = ""
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PoolSettings:
    """How :class:`PoolRunner` watches a pool (:func:`mutualrl.launch.supervise.machine_workers.watch_settings` fills
    it from a config)."""

    see_root: Path = field(metadata={"help": "The run's SEE folder: failure markers are written, heartbeats read."})
    stall_timeout_s: float = field(metadata={"help": "A pool none of whose policies (on any machine) shows progress "
                                                    "this long is stalled; this machine's stillest is stopped."})
    grace_s: float = field(default=60.0, metadata={"help": "After a failure, how long the others may exit on their "
                                                          "own before they are terminated."})
    poll_s: float = field(default=0.5, metadata={"help": "Seconds between two looks at the processes and files."})
    max_steps: int | None = field(default=None, metadata={"help": "Steps shown until a worker reports its total."})
    peer_timeout_s: float | None = field(default=None, metadata={"help": "see.peer_timeout_s: heartbeat silence "
                                                                         "that stops the pool (None: not watched)."})
    merge_metrics: bool = field(default=True, metadata={"help": "Write the merged metrics (one writer: machine 0 "
                                                                "of several)."})
    on_peer_failure: str = field(default="stop", metadata={"help": "see.on_peer_failure: 'continue' lets a failed "
                                                                   "policy leave while the others go on."})
    max_restarts: int = field(default=0, metadata={"help": "see.max_restarts: how often a policy that left is "
                                                           "started again and rejoins."})
    watch_see: bool = field(default=False, metadata={"help": "The pool exchanges through the SEE: a deleted SEE "
                                                             "folder stops the run (its steps are gone)."})
    on_spawn: Callable[[str, int], None] | None = field(
        default=None, metadata={"help": "Told each worker's policy and pid as it starts (the run lock records it: a "
                                        "worker outliving its launcher keeps the run folder busy)."})
    stop: StopBudget = field(default_factory=StopBudget, metadata={
        "help": "A stop signal's wait for every policy to save: the plan's checkpoints and the floor (stop_grace.py)."})
    restart_argv: Callable[[str], tuple[list[str], int | None]] | None = field(
        default=None, metadata={"help": "A policy's restart command, resuming from its newest checkpoint, and that "
                                        "checkpoint's step (None: no restart)."})


class PoolRunner:
    """Starts and watches one machine's policy processes; ``remote`` (several machines, launch.nodes): the
    policies elsewhere (:class:`mutualrl.launch.supervise.nodes.RemoteWatch`), and the run ends here when the local
    workers exited and ``remote.finished()``."""

    def __init__(self, processes: Sequence[PolicyProcess], paths: RunPaths, settings: PoolSettings,
                 console: Console | None = None, remote: Any = None):
        self.procs = list(processes)
        self.paths = paths
        self.settings = settings
        self.console = console or Console()
        self.remote = remote
        self.lost: dict[str, dict[str, Any]] = {}
        self.restarts: dict[str, list[dict[str, Any]]] = {}
        self.remote_names = [n for n in (remote.policies if remote is not None else []) if n not in self.names]
        # One writer of the merged metrics (machine 0 with several machines), merging every policy's rows.
        self.merger = MetricsMerger(paths, [*self.names, *self.remote_names]) if settings.merge_metrics else None
        self.recent_rows: dict[str, list[dict[str, Any]]] = {}  # the last logged train rows of each policy
        self.clock = StepClock()  # each policy's time estimate on the progress display
        self.silent_said: set[str] = set()  # policies whose missing learning signal was said
        self.progress = PoolProgress(settings.see_root)  # on this launcher's monotonic clock
        self.step_times = StepTimes()  # each policy's longest step seen: a stop's grace

    @property
    def names(self) -> list[str]:
        return list(dict.fromkeys(p.name for p in self.procs))

    def _merge(self) -> list[dict[str, Any]]:
        rows = self.merger.poll() if self.merger is not None else []
        self._say_no_signal(rows)
        return rows

    def _say_no_signal(self, rows: list[dict[str, Any]]) -> None:
        """Once per policy, on the progress display: several logged steps without reward spread in any group."""
        from mutualrl.training.reward_signal_watch import PATIENCE, no_signal_note

        for row in rows:
            name = str(row.get("policy"))
            if row.get("kind") != "train" or name in self.silent_said:
                continue
            recent = self.recent_rows.setdefault(name, [])
            recent[:] = [*recent, row][-PATIENCE:]
            note = no_signal_note(name, recent)
            if note is not None:
                self.silent_said.add(name)
                self.console.print(f"[yellow]warning:[/] {note}", highlight=False, soft_wrap=True)

    def _print_steps(self, rows: list[dict[str, Any]]) -> int:
        """Non-TTY progress: one line per merged ``kind: train`` row (a logged step of one policy), its figures from
        each peer (the detail view) at its end, never wrapped; how many steps were printed."""
        printed = 0
        for row in rows:
            if row.get("kind") == "train":
                total = self._status_of(str(row.get("policy"))).get("max_steps") or self.settings.max_steps
                peers = "".join(f"  | from {peer}: {text}" for peer, text in source_details(row).items())
                self.console.print(step_line(row, total) + peers, highlight=False, soft_wrap=True, markup=False)
                printed += 1
        return printed

    # -- processes ------------------------------------------------------------------------
    def start(self) -> None:
        clear_request(self.paths)  # the stop of an earlier launch of this run is not this one's
        if self.settings.watch_see:
            write_text_atomic(see_marker(self.settings.see_root), f"{self.paths.root}\n")
        for proc in self.procs:
            self._spawn(proc)

    def _check_see(self) -> None:
        """The SEE folder of a pool that exchanges must outlive the run: deleted, its steps and consumption logs are
        gone and the run cannot be trusted (workers would re-create empty folders and go on)."""
        if self.settings.watch_see and not see_marker(self.settings.see_root).exists():
            raise RunFolderError(f"the SEE folder {self.settings.see_root} was deleted while the run trained (its "
                                 "marker is gone): the exchange's steps are lost; the run was stopped. `mutualrl "
                                 "train --resume` starts again from the newest checkpoint")

    def _spawn(self, proc: PolicyProcess) -> None:
        proc.log_path.parent.mkdir(parents=True, exist_ok=True)
        log_fh = proc.log_path.open("ab")
        proc.marks = file_marks(self.paths, proc.name)
        # Workers watch this pid and stop when it dies (ops.watchdog): no orphans.
        env = {**os.environ, **proc.env, LAUNCHER_PID_ENV: str(os.getpid())}
        cwd = spawn_dir(self.paths.root, proc.cwd)
        proc.popen = worker_process.start_worker_process(proc.argv, env, cwd, log_fh)  # looked up at each start
        log_fh.close()
        if self.settings.on_spawn is not None:
            self.settings.on_spawn(proc.name, proc.popen.pid)
        proc.returncode = None
        self.progress.started(proc.name)

    def terminate(self, procs: Sequence[PolicyProcess], sig: int = signal.SIGTERM) -> None:
        """``sig`` to each live worker's process group; a SIGKILL to its ranks' groups too (torchrun's agent starts
        each rank in a session of its own, and a killed agent passes nothing on)."""
        for proc in procs:
            if proc.popen is not None and proc.popen.poll() is None:
                groups = worker_process.process_groups(proc.popen.pid) if sig == signal.SIGKILL else {proc.popen.pid}
                for group in groups:
                    try:
                        os.killpg(group, sig)
                    except (ProcessLookupError, PermissionError):
                        pass

    def _status_of(self, name: str) -> dict[str, Any]:
        return read_status(self.paths.status(name))

    # -- main loop ------------------------------------------------------------------------
    def run(self) -> RunOutcome:
        started = time.monotonic()
        try:
            raise_if_interrupted()  # a Ctrl-C during planning whose KeyboardInterrupt Python dropped
            self.start()
        except KeyboardInterrupt:  # Ctrl-C while a large pool is still starting: stop what has started
            self._stop_all()
            return RunOutcome(False, {p.name: p.returncode for p in self.procs}, None, "interrupted",
                              seconds=time.monotonic() - started)
        live = self.console.is_terminal
        progress = progress_display(self.console)  # step and estimate stay in view; the figures are cut first
        rows = PolicyRows(progress, [*self.names, *self.remote_names])  # a line per policy, its peers' under it
        tasks = rows.main
        last_plain, last_key = 0.0, None
        failure: tuple[str, str] | None = None
        try:
            with progress:
                while True:
                    raise_if_interrupted()
                    self._check_see()
                    new_rows = self._merge()
                    now = time.monotonic()
                    statuses = {name: self._status_of(name) for name in [*self.names, *self.remote_names]}
                    self.progress.look(statuses)
                    self.step_times.look(statuses)
                    for name, status in statuses.items():
                        rows.show_sources(name, status)
                    lines, key = self._remote_progress(progress, tasks, statuses)
                    for proc in self.procs:
                        line, proc_key = self._local_progress(proc, progress, tasks[proc.name], statuses[proc.name])
                        lines.append(line)
                        key.append(proc_key)
                        failure = self._check(proc, failure)
                    if failure is None and self.remote is not None:
                        failure = self.remote.failure()
                    # Piped to a log: a line per logged step of each policy, from its merged metrics rows (as
                    # TRL logs; polling the status files would skip steps made between two polls), and the
                    # status of all policies whenever a phase changes, else every 30 s to show the run is alive.
                    if not live:
                        if self._print_steps(new_rows):
                            last_plain = now  # a step line shows the run is alive
                        if key != last_key or now - last_plain > PLAIN_ALIVE_S:
                            last_plain, last_key = now, key
                            self.console.print(" | ".join(lines), highlight=False, soft_wrap=True, markup=False)
                    local_done = all(p.returncode is not None for p in self.procs)
                    if local_done and failure is None and self.remote is not None:
                        self.remote.report(True, returncodes={p.name: p.returncode for p in self.procs})
                    if failure is not None or (local_done and (self.remote is None or self.remote.finished())):
                        break
                    time.sleep(self.settings.poll_s)
            if failure is not None:
                return self._handle_failure(*failure, started=started)
        except KeyboardInterrupt:
            self._stop_at_step()
            self._merge()
            return RunOutcome(False, {p.name: p.returncode for p in self.procs}, None, "interrupted",
                              seconds=time.monotonic() - started)
        except (StorageError, RunFolderError) as err:  # the launcher's own write, a deleted SEE: stop, say why
            self._stop_all()
            return RunOutcome(False, {p.name: p.returncode for p in self.procs}, None, str(err),
                              seconds=time.monotonic() - started,
                              extra={"storage": True} if isinstance(err, StorageError) else {})
        final_rows = self._merge()
        if not live:
            self._print_steps(final_rows)
        extra = {"lost": self.lost} if self.lost else {}
        if self.restarts:
            extra["restarted"] = self.restarts
        return RunOutcome(True, {p.name: p.returncode for p in self.procs}, seconds=time.monotonic() - started,
                          extra=extra)

    def _remote_progress(self, progress: Progress, tasks: dict[str, Any],
                         statuses: dict[str, dict[str, Any]]) -> tuple[list[str], list[Any]]:
        """The progress of the policies on other machines: their bars, plain-text lines and change keys."""
        lines, key = [], []
        for name in self.remote_names:
            st = statuses[name]
            total = st.get("max_steps") or self.settings.max_steps or None
            info = describe_status(st) + " (elsewhere)"
            step = int(st.get("step", 0) or 0)
            progress.update(tasks[name], completed=step, total=total, info=info, eta=self.clock.eta(name, step, total))
            lines.append(f"{name}: step {st.get('step', 0)}/{total or '?'} {info}")
            key.append((name, None if self.merger is not None else st.get("step", 0), plain_phase(st.get("phase"))))
        return lines, key

    def _local_progress(self, proc: PolicyProcess, progress: Progress, task: Any,
                        st: dict[str, Any]) -> tuple[str, Any]:
        """A local policy's bar, plain-text line and change key."""
        step = proc.last_step = int(st.get("step", 0) or 0)
        info = describe_status(st)
        total = st.get("max_steps") or self.settings.max_steps or None
        progress.update(task, completed=step, total=total, info=info, eta=self.clock.eta(proc.name, step, total))
        # With merged metrics, each logged step gets its own line: only phases count in the key.
        return (f"{proc.name}: step {step}/{total or '?'} {info}",
                (proc.name, None if self.merger is not None else step, plain_phase(st.get("phase"))))

    def _check(self, proc: PolicyProcess, failure: tuple[str, str] | None) -> tuple[str, str] | None:
        """The pool's failure, (policy, reason), after a look at ``proc``: its exit, its silence or stall. A failure
        of its own that ``see.on_peer_failure=continue`` lets go is none."""
        if proc.returncode is None and proc.popen is not None:
            rc = proc.popen.poll()
            if rc is not None:
                proc.returncode = rc
                if rc != 0 and failure is None:
                    failure = (proc.name, (storage_reason(proc.log_path, rc, self.paths.root)
                                           or stop_reason(proc.log_path) or describe_exit(rc))
                               + in_reward_function(self.paths, proc.name))
                elif failure is None:  # a run is done when every policy trained all its steps, nothing else
                    reason = unfinished_exit(self.paths, proc.name, proc.marks, self.settings.max_steps,
                                             proc.log_path)
                    failure = (proc.name, reason + in_reward_function(self.paths, proc.name)) if reason else None
                    if failure is None:
                        self.progress.finished(p.name for p in self.procs if p.returncode is None)
        if failure is None and proc.returncode is None:
            failure = self._silent_or_stalled(proc)
            if failure is not None:
                failure = (failure[0], failure[1] + in_reward_function(self.paths, proc.name))
                self.terminate([proc], signal.SIGKILL)
        if failure is not None and failure[0] == proc.name and self._let_go(proc, failure[1]):
            failure = None
        return failure

    def _let_go(self, proc: PolicyProcess, reason: str) -> bool:
        """Under ``see.on_peer_failure=continue``, let a failed policy leave while another still trains: mark it
        failed (its peers drop it at their next exchange) and go on. False: stop the pool (as under ``stop``).
        Only this machine's policies can leave; a failure reported from another machine stops the pool."""
        from mutualrl.see.liveness import mark_policy_failed

        others = [p for p in self.procs if p is not proc and p.name not in self.lost]
        if self.settings.on_peer_failure != "continue" or not any(p.returncode is None for p in others):
            return False  # nobody left to go on: the run failed
        try:
            mark_policy_failed(self.settings.see_root, proc.name, f"policy process {reason}")
        except Exception:  # pragma: no cover - best effort
            pass
        self.lost[proc.name] = {"step": proc.last_step, "reason": reason, "log_tail": tail(proc.log_path, 5)}
        self.console.print(f"[yellow]policy {proc.name} left the pool at step {proc.last_step}: {reason}; "
                           f"see.on_peer_failure=continue, the others go on[/]", highlight=False)
        if proc.popen is not None:
            if proc.popen.poll() is None:
                self.terminate([proc], signal.SIGKILL)
            proc.returncode = proc.popen.wait()  # once: the reason recorded above stays
        settings = self.settings
        if settings.restart_argv is not None and len(self.restarts.get(proc.name, [])) < settings.max_restarts:
            self._restart(proc, self.lost.pop(proc.name))
        return True

    def _restart(self, proc: PolicyProcess, left: dict[str, Any]) -> None:
        """Start a policy that left again, from its newest checkpoint; it clears its failure marker and rejoins."""
        from mutualrl.ops.watchdog import REJOIN_ENV

        argv, checkpoint = self.settings.restart_argv(proc.name)
        if self.merger is not None:
            self.merger.rollback(proc.name, checkpoint or 0)
        attempts = self.restarts.setdefault(proc.name, [])
        attempts.append({"step": left["step"], "reason": left["reason"], "resumed_from": checkpoint})
        proc.argv, proc.env = argv, {**proc.env, REJOIN_ENV: str(len(attempts))}
        self.console.print(f"[yellow]restarting {proc.name} from "
                           f"{'checkpoint ' + str(checkpoint) if checkpoint is not None else 'its start'} "
                           f"(restart {len(attempts)} of {self.settings.max_restarts}, see.max_restarts); it rejoins "
                           f"the pool[/]", highlight=False)
        self._spawn(proc)

    def _silent_or_stalled(self, proc: PolicyProcess) -> tuple[str, str] | None:
        """A live process that stopped beating (hung, stopped) or a pool that stopped getting on: (policy, reason)."""
        settings = self.settings
        if settings.peer_timeout_s is not None:
            age = self.progress.silent_for(proc.name)  # a restarted policy is not judged by its predecessor's beat
            if age is not None and age > settings.peer_timeout_s:
                return proc.name, (f"sent no heartbeat for {age:.0f}s (see.peer_timeout_s="
                                   f"{settings.peer_timeout_s:g}): alive but hung or stopped")
        # Lock-step policies wait for each other, so one whose peer still gets on (a long validation, a long step,
        # on this machine or another) is not stalled: the pool is, once none got on; this machine's stillest is named.
        live = [p.name for p in self.procs if p.returncode is None and p.popen is not None] or [proc.name]
        now = self.progress.clock()  # one instant for every policy: a tie names the first, not the last looked at
        if self.progress.pool_still_for([*live, *self.remote_names]) > settings.stall_timeout_s and \
                proc.name == max(live, key=lambda name: self.progress.still_for(name, now)):
            return proc.name, f"made no progress for {self.progress.still_for(proc.name, now):.0f}s (stalled)"
        return None

    def _handle_failure(self, policy: str, reason: str, started: float) -> RunOutcome:
        from mutualrl.see.liveness import mark_policy_failed

        failed = next((p for p in self.procs if p.name == policy), None)  # None: a policy on another machine
        try:
            mark_policy_failed(self.settings.see_root, policy, f"policy process {reason}")
        except Exception:  # pragma: no cover - best effort
            pass
        # Peers notice the marker at their next barrier and exit non-zero naming the peer.
        self._reap(self.settings.grace_s)
        self._say_teardown()
        self.terminate(self.procs)
        self._reap(10.0)
        self.terminate(self.procs, signal.SIGKILL)
        self._reap(5.0)
        self._merge()
        return RunOutcome(False, {p.name: p.returncode for p in self.procs}, policy, reason,
                          log_tail=tail(failed.log_path if failed else self.paths.log(policy)),
                          seconds=time.monotonic() - started, extra={"storage": True} if is_storage_message(reason) else {})

    def _stop_at_step(self) -> None:
        """A stop signal while the pool trains: every policy saves a checkpoint at one step and exits
        (training/stop_request.py); whatever still runs after the grace (stop_grace.py: the steps to go as measured,
        the plan's checkpoints, a floor), or at a second stop signal, is killed. Before any policy completed a step
        there is nothing to save: :meth:`_stop_all`."""
        live = [p.name for p in self.procs if p.popen is not None and p.popen.poll() is None]
        names = [*live, *self.remote_names]
        how = interrupt_requested() or "SIGINT"
        statuses: dict[str, dict[str, Any]] = {}

        def read_statuses() -> dict[str, dict[str, Any]]:
            statuses.update({name: self._status_of(name) for name in names})
            return statuses

        try:  # one machine decides the step (machine 0); the others read it, so two views cannot name two steps
            if self.remote is None or self.remote.machine == 0:
                step = request_stop(self.paths, how, read_statuses)
            else:
                step = follow_stop(self.paths, lambda: request_stop(self.paths, how, read_statuses))
                read_statuses()  # for the time to the step
        except Exception:  # a full disk, a deleted folder: no request, the workers are stopped as before
            step = 0
        if step == 0 or not live:
            self._stop_all()
            return
        to_step = self.step_times.to_step(step, statuses)
        self.console.print(f"[yellow]{how}: stopping: each policy saves its step in flight (checkpoint-{step}); "
                           f"{self.settings.stop.describe(to_step)}; another Ctrl-C stops at once[/]",
                           highlight=False, soft_wrap=True)
        try:
            self._reap(self.settings.stop.grace_s(to_step))
            self._wait_for_saves(SAVE_WAIT_CAP_S)
        except KeyboardInterrupt:
            pass
        self.terminate(self.procs, signal.SIGKILL)  # a SIGTERM would only ask again
        self._reap(5.0)

    def _stop_all(self, grace_s: float = 10.0) -> None:
        """Ctrl-C: SIGTERM every policy at once, then SIGKILL whatever still runs after ``grace_s``, so a pool
        of any size is gone within seconds (a worker busy importing torch can miss a SIGTERM)."""
        self._say_teardown()
        self.terminate(self.procs)
        self._reap(grace_s)
        self.terminate(self.procs, signal.SIGKILL)  # terminate() skips the processes that have ended
        self._reap(5.0)

    def _say_teardown(self) -> None:
        """The SIGTERM that follows ends the workers now: none waits for a stop at a step (stop_request.py)."""
        try:
            request_teardown(self.paths)
        except Exception:  # pragma: no cover - best effort (a full disk): a signalled worker then waits 5 s
            pass

    def _wait_for_saves(self, cap_s: float) -> None:
        """After the grace: the live policies whose status says they are writing their checkpoint are waited for
        (said once), up to ``cap_s`` seconds more."""
        deadline, said = time.monotonic() + cap_s, False
        while time.monotonic() < deadline:
            live = [p for p in self.procs if p.popen is not None and p.popen.poll() is None]
            saving = still_saving({p.name: self._status_of(p.name) for p in live})
            if not saving:
                return
            if not said:
                self.console.print(f"[yellow]{', '.join(saving)}: still writing its checkpoint after the grace: waiting "
                                   f"for it (at most {cap_s:.0f} s more; another Ctrl-C stops at once)[/]",
                                   highlight=False, soft_wrap=True)
                said = True
            self._reap(1.0)

    def _reap(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            if proc.popen is None:
                continue
            remaining = max(0.0, deadline - time.monotonic())
            try:
                proc.returncode = proc.popen.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                pass


PLAIN_ALIVE_S = 30
"""Non-TTY progress: the policies' status line at least this often (seconds) when no step line came."""
ROUTINE_PHASES = ("training", "waiting for peers", "validating")
"""The phases every step passes through: a plain log's status line is not printed for each of them."""


def plain_phase(phase: Any) -> str:
    """``phase`` as the non-TTY log tells phases apart: the routine of every step (:data:`ROUTINE_PHASES`) is one
    ``running`` (its step lines show it); starting, saving, stopping, finished are themselves."""
    text = str(phase or "starting")
    return "running" if text.startswith(ROUTINE_PHASES) else text


def describe_status(status: dict[str, Any]) -> str:
    return "  ".join([str(status.get("phase", "starting")), *metric_parts(status)])


def metric_parts(status: dict[str, Any]) -> list[str]:
    """The progress line's figures (reward, held-out reward@1, each regime's status metrics, entropy)."""
    parts = []
    regime_keys = [pair for spec in all_regimes() for pair in spec.status_keys]
    for key, label in (("reward_mean", "reward"), ("eval/reward@1", "val@1"), *regime_keys, ("entropy", "H")):
        value = status.get(key)
        if isinstance(value, (int, float)):
            parts.append(f"{label} {value:.3g}")
    return parts


def step_line(row: dict[str, Any], total: int | None) -> str:
    """One log line for a merged ``kind: train`` metrics row (non-TTY progress)."""
    return "  ".join([f"{row.get('policy')}: step {row.get('step')}/{total or '?'}", *metric_parts(row)])

"""Which peer round each training step reads, and which peers are still in the pool.

``see.max_staleness = 0`` with ``see.on_peer_failure = stop`` is the paper's lock-step: every
rank waits at the SEE barrier for the peers' records of its own step (exactly as before
these settings existed). Otherwise rank 0 of the policy decides, through
:func:`mutualrl.see.staleness.choose_peer_round`, which peer round to read (waiting only for a
peer more than S rounds behind) and drops a failed peer under ``continue``. It logs each
decision to ``<see>/_consumed/<policy>.jsonl``; the other ranks poll that line (files, like
the SEE barrier: no collective with its own timeout), so every rank reads the same round, and
a run can be replayed and audited.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from mutualrl.errors import UsageError
from mutualrl.see.errors import PeerFailedError, PeerTimeoutError
from mutualrl.see.staleness import PeerRound, choose_peer_round

log = logging.getLogger("mutualrl.consumption")

CONSUMED_DIR = "_consumed"


class PeerConsumption:
    """Per policy: its own exchange rounds, the last peer round read, the active and departed peers."""

    def __init__(self, exchange: Any, peers: list[str], max_staleness: int = 0, on_peer_failure: str = "stop",
                 accelerator: Any = None, replay: Path | str | None = None):
        self.exchange = exchange
        self.active = list(peers)
        self.departed: dict[str, dict[str, Any]] = {}
        self.max_staleness = int(max_staleness)
        self.on_peer_failure = on_peer_failure
        self.accelerator = accelerator
        self.own_rounds: list[int] = []
        self.last_consumed: int | None = None
        self.replay = replay_plan(replay, exchange.policy) if replay else None

    @property
    def lock_step(self) -> bool:
        return self.max_staleness == 0 and self.on_peer_failure == "stop" and self.replay is None

    @property
    def is_main(self) -> bool:
        return self.accelerator is None or self.accelerator.is_main_process

    def note_round(self, step: int) -> None:
        """Record that this policy published round ``step`` (its window of the last S+1 rounds)."""
        self.own_rounds = [*self.own_rounds, int(step)][-(self.max_staleness + 1):]

    def next_round(self, step: int) -> PeerRound:
        """The peer round to read at ``step`` (this policy's newest published round)."""
        self.note_round(step)
        if self.lock_step:
            self.exchange.wait_for(step, policies=self.active)
            chosen = PeerRound(int(step), int(step), 0)
        elif self.is_main:
            chosen, self.active, self.departed = self._decide(int(step))
        else:  # rank 0 decides (it may wait long); the others read its decision from the log, no collective
            chosen = self._await_decision(int(step))
        if chosen.peer_step is not None:
            self.last_consumed = chosen.peer_step
        if self.is_main:
            self._log(chosen)
        return chosen

    def _await_decision(self, step: int) -> PeerRound:
        """Ranks > 0: poll rank 0's consumption log for this step's line (files, like the SEE barrier)."""
        path = log_path(self.exchange.root, self.exchange.policy)
        deadline = time.monotonic() + self.exchange.barrier_timeout_s * (len(self.active) + 1) + 600.0
        delay = 0.001
        while True:
            for row in reversed(parse_log(path)):
                if row.get("run_id") == self.exchange.run_id and row.get("step") == step:
                    for peer in row["departed"]:
                        self.departed.setdefault(peer, {"step": step, "reason": "dropped by rank 0"})
                    self.active = list(row["peers"])
                    return PeerRound(step, row["peer_step"], row["age"], bool(row["waited"]))
            if time.monotonic() > deadline:
                raise PeerTimeoutError(
                    f"SEE: rank {self.exchange.rank} of policy {self.exchange.policy!r} found no decision of rank 0 "
                    f"for step {step} in {path}", step=step, path=path, missing={self.exchange.policy: [0]},
                    waited_s=0.0, heartbeat_age_s={})
            time.sleep(delay)
            delay = min(delay * 2, self.exchange.poll_interval_s)

    def _decide(self, step: int) -> tuple[PeerRound, list[str], dict[str, dict[str, Any]]]:
        if self.replay is not None:
            return self._replayed(step)
        while self.active:
            try:
                for peer in list(self.active):  # a failure marker counts even when no wait would notice it
                    self.exchange.raise_if_failed(peer, step)
                chosen = choose_peer_round(self.exchange, self.own_rounds, self.active, self.max_staleness,
                                           self.last_consumed)
                return chosen, list(self.active), dict(self.departed)
            except PeerFailedError as err:
                if self.on_peer_failure == "stop":
                    raise
                self._drop(str(err.peer), step, err.reason)
            except PeerTimeoutError as err:
                if self.on_peer_failure == "stop":
                    raise
                for peer in err.peers:
                    self._drop(peer, step, f"committed nothing for {err.waited_s:.0f}s (see.barrier_timeout_s)")
        return PeerRound(step, None, None), [], dict(self.departed)

    def _replayed(self, step: int) -> tuple[PeerRound, list[str], dict[str, dict[str, Any]]]:
        """The recorded choice of ``step``: the same round (waited for), the same peers."""
        row = self.replay.get(step)
        if row is None:
            raise UsageError(f"see.replay_consumption: no record of step {step} for policy {self.exchange.policy!r}")
        for peer in row["departed"]:
            if peer in self.active:
                self._drop(peer, step, "left at this step in the replayed run")
        peer_step = row["peer_step"]
        if peer_step is not None:
            self.exchange.wait_for(peer_step, policies=self.active)
        return PeerRound(step, peer_step, row["age"], bool(row["waited"])), list(self.active), dict(self.departed)

    def _drop(self, peer: str, step: int, reason: str) -> None:
        if peer not in self.active:
            return
        self.active.remove(peer)
        self.departed[peer] = {"step": step, "reason": reason, "time": time.time()}
        log.warning("policy %s: peer %s left the pool at step %d (%s); continuing with %s", self.exchange.policy,
                    peer, step, reason, ", ".join(self.active) or "no peers (standalone)")

    def _log(self, chosen: PeerRound) -> None:
        path = log_path(self.exchange.root, self.exchange.policy)
        path.parent.mkdir(parents=True, exist_ok=True)
        row = {"run_id": self.exchange.run_id, "step": chosen.step, "peer_step": chosen.peer_step, "age": chosen.age,
               "waited": chosen.waited, "peers": list(self.active), "departed": sorted(self.departed)}
        with path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")


def replay_plan(folder: Path | str, policy: str) -> dict[int, dict[str, Any]]:
    """step -> recorded choice of ``policy`` in an earlier run (over its launches) for ``see.replay_consumption``.

    ``folder`` is that run's folder, its exchange folder or the ``_consumed`` folder itself.
    """
    base = Path(folder)
    for candidate in (base, base / CONSUMED_DIR, base / "see" / CONSUMED_DIR):
        rows = parse_log(candidate / f"{policy}.jsonl")
        if rows:
            return {int(r["step"]): r for r in rows}  # a resumed run's later launches replace the steps they redid
    raise UsageError(f"see.replay_consumption: no consumption log of policy {policy!r} in {base} "
                     f"(expected {base}/see/{CONSUMED_DIR}/{policy}.jsonl or {base}/{policy}.jsonl)")


def read_consumption(see_root: Path | str, policy: str, run_id: str | None = None) -> list[dict[str, Any]]:
    """The consumption log of ``policy`` in the exchange ``see_root`` (rows of ``run_id`` only, when given)."""
    rows = parse_log(log_path(see_root, policy))
    return [r for r in rows if run_id is None or r.get("run_id") == run_id]


def log_path(see_root: Path | str, policy: str) -> Path:
    """``<see>/_consumed/<policy>.jsonl``: one line per step, written by the policy's rank 0."""
    return Path(see_root) / CONSUMED_DIR / f"{policy}.jsonl"


def parse_log(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return []
    rows = []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:  # a line being appended right now
            continue
    return rows

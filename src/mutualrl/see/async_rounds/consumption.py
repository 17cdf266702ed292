"""Which peer round each training step reads, and which peers are still in the pool, off lock-step.

With ``see.max_staleness = S > 0``, ``see.on_peer_failure = continue`` or ``see.replay_consumption``,
rank 0 of the policy decides, through :func:`mutualrl.see.async_rounds.staleness.choose_peer_round`, which
peer round to read (waiting only for a peer more than S rounds behind) and drops a failed peer under
``continue``. It logs each decision to ``<see>/_consumed/<policy>.jsonl``; the other ranks poll that
line (files, like the SEE barrier: no collective with its own timeout), so every rank reads the same
round, and a run can be replayed and audited.

With ``see.catch_up`` rank 0 also decides, at the start of each round, whether to skip it
(:func:`mutualrl.see.async_rounds.staleness.catch_up_target`: a peer persistently faster than this policy
would otherwise keep waiting for it) and logs the skipped span, which the peers read.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

from mutualrl.errors import UsageError
from mutualrl.see.consumption_log import (
    CONSUMED_DIR,
    REJOIN,
    SKIP,
    LogTail,
    append_row,
    is_read_row,
    is_skip_row,
    log_path,
    parse_log,
)
from mutualrl.see.errors import PeerFailedError, PeerTimeoutError
from mutualrl.see.liveness import HeartbeatWatch
from mutualrl.see.lockstep import LockStepConsumption, PeerRound
from mutualrl.see.async_rounds.staleness import catch_up_target, choose_peer_round, has_reached, round_seconds

log = logging.getLogger("mutualrl.consumption")


class BoundedConsumption(LockStepConsumption):
    """The lock-step consumption widened: reads up to ``max_staleness`` rounds old, drops and readmits peers,
    replays a recorded run, skips rounds to catch up. With ``max_staleness=0``, ``on_peer_failure="stop"`` and
    no replay it is lock-step (the regimes then build :class:`LockStepConsumption` itself)."""

    def __init__(self, exchange: Any, peers: list[str], max_staleness: int = 0, on_peer_failure: str = "stop",
                 accelerator: Any = None, replay: Path | str | None = None, catch_up: bool = False,
                 stride: int = 1):
        super().__init__(exchange, peers, accelerator)
        self.max_staleness = int(max_staleness)
        self.on_peer_failure = on_peer_failure
        self.catch_up = catch_up
        self.stride = int(stride)  # optimizer steps between two exchange rounds
        self.skip_until = -1  # rounds before this were decided skipped
        self.replay, self.replay_skips = replay_plan(replay, exchange.policy) if replay else (None, None)
        self.peer_logs = {p: LogTail(exchange.root, p, exchange.run_id) for p in peers}
        self.own_log = LogTail(exchange.root, exchange.policy, exchange.run_id, from_end=True)

    @property
    def lock_step(self) -> bool:  # type: ignore[override]
        return self.max_staleness == 0 and self.on_peer_failure == "stop" and self.replay is None

    @property
    def may_skip(self) -> bool:  # type: ignore[override]
        """Whether rounds may be skipped: under see.catch_up, or replaying a run that skipped some."""
        return self.catch_up or bool(self.replay_skips)

    def note_round(self, step: int) -> None:
        """Record that this policy trained round ``step`` (its window of the last S+1 trained rounds: a skipped
        round updates nothing, so it does not age the records this policy reads)."""
        self.own_rounds = [*self.own_rounds, int(step)][-(self.max_staleness + 1):]

    def next_round(self, step: int) -> PeerRound:
        """The peer round to read at ``step`` (this policy's newest published round)."""
        if self.lock_step:
            return super().next_round(step)
        self.note_round(step)
        started = time.monotonic()
        if self.is_main:
            chosen, self.active, self.departed = self._decide(int(step))
        else:  # rank 0 decides (it may wait long); the others read its decision from the log, no collective
            chosen = self._await_decision(int(step))
        if chosen.peer_step is not None:
            self.last_consumed = chosen.peer_step
        if self.is_main:
            self.log_round(chosen, time.monotonic() - started)
        return chosen

    # -- catching up (see.catch_up) -----------------------------------------------------
    def skip_round(self, step: int, last_step: int) -> bool:
        """Whether to skip round ``step`` (train nothing, publish nothing); rank 0 decides at the first round of a
        span and logs ``[step, until)``, the other ranks read that line. Rounds at or after ``last_step`` never run."""
        step = int(step)
        if step >= self.skip_until:
            if not self.is_main:
                until = self._await_skip(step)
            else:
                until = self._plan_skip(step, int(last_step))
                append_row(self.exchange.root, self.exchange.policy,
                           {"run_id": self.exchange.run_id, "kind": SKIP, "step": step, "until": until})
                if until > step:
                    log.info("policy %s: skipping rounds %d..%d so faster peers need not wait", self.exchange.policy,
                             step, until - self.stride)
            self.skip_until = until
        return step < self.skip_until

    def _plan_skip(self, step: int, last_step: int) -> int:
        if self.replay_skips is not None:
            return int(self.replay_skips.get(step, {"until": step})["until"])
        if not self.catch_up or not self.active:
            return step
        own_s = round_seconds(self.own_log.read_rows())
        peers = {}
        for peer in self.active:
            rows = self.peer_logs[peer].read_rows()
            if rows:
                peers[peer] = (int(rows[-1]["step"]) + self.stride, round_seconds(rows))
        return min(catch_up_target(step, self.stride, self.max_staleness, own_s, peers), last_step)

    def _await_skip(self, step: int) -> int:
        row = self._await_row(lambda r: is_skip_row(r) and r.get("step") == step, step)
        return int(row["until"])

    def _await_decision(self, step: int) -> PeerRound:
        """Ranks > 0: poll rank 0's consumption log for this step's line (files, like the SEE barrier)."""
        row = self._await_row(lambda r: is_read_row(r) and r.get("step") == step, step)
        self.departed = {p: self.departed.get(p, {"step": step, "reason": "dropped by rank 0"}) for p in row["departed"]}
        self.active = list(row["peers"])
        return PeerRound(step, row["peer_step"], row["age"], bool(row["waited"]),
                         None if row.get("read_from") is None else tuple(row["read_from"]))

    def _await_row(self, match: Any, step: int) -> dict[str, Any]:
        """Rank 0's logged row ``match`` of ``step``, waited for while rank 0 is heard beating (it may wait at the
        barrier for as long as a slow peer gets on)."""
        path = log_path(self.exchange.root, self.exchange.policy)
        limit = self.exchange.barrier_timeout_s * (len(self.active) + 1) + 600.0
        rank0, started, looked = HeartbeatWatch(self.exchange.root), time.monotonic(), -math.inf
        delay = 0.001
        while True:
            for row in reversed(self.own_log.refresh()):
                if match(row):
                    return row
            now = time.monotonic()
            if now - looked >= 1.0:
                rank0.look()
                looked = now
            silent = rank0.silent_for(self.exchange.policy, ranks=[0])
            if (now - started if silent is None else silent) > limit:
                raise PeerTimeoutError(
                    f"SEE: rank {self.exchange.rank} of policy {self.exchange.policy!r} found no decision of rank 0 "
                    f"for step {step} in {path}", step=step, path=path, missing={self.exchange.policy: [0]},
                    waited_s=now - started, heartbeat_age_s={})
            time.sleep(delay)
            delay = min(delay * 2, self.exchange.poll_interval_s)

    def _decide(self, step: int) -> tuple[PeerRound, list[str], dict[str, dict[str, Any]]]:
        if self.replay is not None:
            return self._replayed(step)
        self._readmit(step)
        while self.active:
            try:
                for peer in list(self.active):  # a failure marker counts even when no wait would notice it
                    self.exchange.raise_if_failed(peer, step)
                chosen = choose_peer_round(self.exchange, self.own_rounds, self.active, self.max_staleness,
                                           self.last_consumed, self.peer_logs)
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
        """The recorded choice of ``step``: the same round (waited for; the read loads the shards the wait found),
        the same peers."""
        row = self.replay.get(step)
        if row is None:
            raise UsageError(f"see.replay_consumption: no record of step {step} for policy {self.exchange.policy!r}")
        for peer in row["departed"]:
            if peer in self.active:
                self._drop(peer, step, "left at this step in the replayed run")
        for peer in [p for p in row["peers"] if p in self.departed]:  # it rejoined in the replayed run
            del self.departed[peer]
        self.active = [p for p in self.peers if p in row["peers"]]
        peer_step = row["peer_step"]
        read_from = None if row.get("read_from") is None else tuple(row["read_from"])
        shards = None if peer_step is None else self.exchange.wait_for(peer_step, policies=read_from or self.active)
        return (PeerRound(step, peer_step, row["age"], bool(row["waited"]), read_from, shards=shards),
                list(self.active), dict(self.departed))

    def _readmit(self, step: int) -> None:
        """A departed peer rejoins (restarted into the run, see.max_restarts; or dropped as silent and back) once
        its failure marker is gone and it has reached the oldest round we may read: from then on it is bounded
        like any active peer."""
        for peer in list(self.departed):
            try:
                self.exchange.raise_if_failed(peer, step)
            except PeerFailedError:  # still marked failed in this run
                continue
            if has_reached(self.exchange, peer, self.own_rounds[0], self.peer_logs.get(peer)):
                del self.departed[peer]
                self.active = [p for p in self.peers if p in self.active or p == peer]
                log.warning("policy %s: peer %s rejoined the pool at step %d", self.exchange.policy, peer, step)

    def _drop(self, peer: str, step: int, reason: str) -> None:
        if peer not in self.active:
            return
        self.active.remove(peer)
        self.departed[peer] = {"step": step, "reason": reason, "time": time.time()}
        log.warning("policy %s: peer %s left the pool at step %d (%s); continuing with %s", self.exchange.policy,
                    peer, step, reason, ", ".join(self.active) or "no peers (standalone)")


def rejoin_pool(exchange: Any, resume_from: str | None, stride: int) -> None:
    """A policy restarted into its running pool (see.max_restarts): keep the rounds it already committed, tell the
    peers where it starts again (a rejoin line: they forget its earlier lines), then clear its failure marker."""
    from mutualrl.see.liveness import clear_failure

    step = int(Path(resume_from).name.rpartition("-")[2]) if resume_from else 0
    if step % stride:
        raise UsageError(f"policy {exchange.policy!r} cannot rejoin from {resume_from}: step {step} is not on a "
                         f"round boundary (a round is {stride} optimizer steps); make grpo.save_steps a multiple "
                         f"of {stride}")
    exchange.keep_committed = True
    if exchange.rank == 0:
        append_row(exchange.root, exchange.policy, {"run_id": exchange.run_id, "kind": REJOIN, "step": step})
        clear_failure(exchange.root, exchange.policy)


def replay_plan(folder: Path | str, policy: str) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
    """step -> recorded read choice, and step -> recorded skip decision, of ``policy`` in an earlier run (over its
    launches) for ``see.replay_consumption``.

    ``folder`` is that run's folder, its exchange folder or the ``_consumed`` folder itself.
    """
    base = Path(folder)
    for candidate in (base, base / CONSUMED_DIR, base / "see" / CONSUMED_DIR):
        rows = parse_log(candidate / f"{policy}.jsonl")
        if rows:  # a resumed run's later launches replace the steps they redid
            return ({int(r["step"]): r for r in rows if is_read_row(r)},
                    {int(r["step"]): r for r in rows if is_skip_row(r)})
    raise UsageError(f"see.replay_consumption: no consumption log of policy {policy!r} in {base} "
                     f"(expected {base}/see/{CONSUMED_DIR}/{policy}.jsonl or {base}/{policy}.jsonl)")

"""The paper's lock-step consumption of the SEE: at each exchange round, wait for every peer's records of it.

Paper, "Dataflow in One Training Loop": every policy publishes its records of step ``i`` and
reads its peers' records of the same step ``i`` (the SEE barrier,
:meth:`~mutualrl.see.exchange.ExperienceExchange.wait_for`). That is all of this module;
everything outside lock-step (``see.max_staleness``, ``see.on_peer_failure=continue``,
``see.catch_up``, ``see.replay_consumption``, a policy restarted into its pool) is the optional
:mod:`mutualrl.see.async_rounds`, which subclasses :class:`LockStepConsumption`; :mod:`mutualrl.see.rounds` chooses
between them and reads a round in one call.

Rank 0 of each policy logs every round it read to ``<see>/_consumed/<policy>.jsonl``
(:mod:`mutualrl.see.consumption_log`): when, and how long it waited (``mutualrl see inspect``
shows it; a later run can replay it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mutualrl.see.consumption_log import append_row

if TYPE_CHECKING:
    from mutualrl.see.exchange import ExperienceExchange
    from mutualrl.see.shards import ShardInfo


@dataclass(frozen=True)
class PeerRound:
    """What one consumer step reads from its peers.

    Attributes:
        step: the trainer step of the consumer (its own published round).
        peer_step: the peers' round it reads (``None``: nothing new within the bound).
        age: exchange rounds between ``step`` and ``peer_step`` (0: lock-step fresh; ``None`` with no data).
        waited: whether the consumer had to wait for a peer more than S rounds behind.
        peers: the peers with records of ``peer_step`` (``None``: every active peer; a peer that skipped the
            round has none).
        shards: each peer's committed shards of ``peer_step`` as the consumer found them while choosing the round
            (the barrier's :meth:`~mutualrl.see.exchange.ExperienceExchange.wait_for`), so the read loads them
            without scanning the folders again; ``None`` where the choice came from elsewhere (off lock-step, a
            rank > 0 reads rank 0's decision from the log and scans).
    """

    step: int
    peer_step: int | None
    age: int | None
    waited: bool = False
    peers: tuple[str, ...] | None = None
    shards: dict[str, list[ShardInfo]] | None = field(default=None, compare=False, repr=False)


class LockStepConsumption:
    """Per policy: the peers it reads, and the round it read last (lock-step: always its own step)."""

    lock_step = True
    may_skip = False
    """Whether rounds may be skipped (only off lock-step, :mod:`mutualrl.see.async_rounds`)."""

    def __init__(self, exchange: ExperienceExchange, peers: list[str], accelerator: Any = None):
        self.exchange = exchange
        self.peers = list(peers)
        self.active = list(peers)  # lock-step: a peer never leaves (a failed one stops the run)
        self.departed: dict[str, dict[str, Any]] = {}
        self.accelerator = accelerator
        self.own_rounds: list[int] = []  # the rounds whose records may still be read (lock-step: the newest)
        self.last_consumed: int | None = None

    @property
    def is_main(self) -> bool:
        return self.accelerator is None or self.accelerator.is_main_process

    def note_round(self, step: int) -> None:
        """Record that this policy trained round ``step``; a peer may still read its records of it."""
        self.own_rounds = [int(step)]

    def next_round(self, step: int) -> PeerRound:
        """Wait at the SEE barrier until every peer committed round ``step``; that round is read, from the shards
        the barrier found (``shards``)."""
        self.note_round(step)
        started = time.monotonic()
        found = self.exchange.wait_for(step, policies=self.active)
        chosen = PeerRound(int(step), int(step), 0, shards=found)
        self.last_consumed = chosen.peer_step
        if self.is_main:
            self.log_round(chosen, time.monotonic() - started)
        return chosen

    def log_round(self, chosen: PeerRound, wait_s: float) -> None:
        """One read row: the choice, when it was made and how long it waited (off lock-step, peers' catch-up
        reads the times)."""
        append_row(self.exchange.root, self.exchange.policy, {
            "run_id": self.exchange.run_id, "step": chosen.step, "peer_step": chosen.peer_step, "age": chosen.age,
            "waited": chosen.waited, "peers": list(self.active), "departed": sorted(self.departed),
            "read_from": None if chosen.peers is None else list(chosen.peers), "time": time.time(),
            "clock": time.monotonic(), "wait_s": round(wait_s, 6)})  # round times: clock, which never jumps

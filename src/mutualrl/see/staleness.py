"""Staleness-bounded reads of the SEE: use the newest peer records within S exchange rounds, wait only beyond.

The paper's pools run in lock-step: at exchange round ``i`` (the ``i``-th step at which the
policy generated and published) every policy waits for every peer's records of the same
round. With ``see.max_staleness = S > 0`` a policy at round ``i`` instead takes the newest
round ``e`` that all its active peers have committed, provided ``e >= i - S``, and waits
only while some peer has not yet committed round ``i - S`` (docs/see.md, "Bounded
staleness"). Each peer round is consumed at most once: a round already used yields
nothing new, and the step runs without peer data (standalone).

Everything here is file scanning on top of :class:`~mutualrl.see.exchange.ExperienceExchange`;
the choice is a pure function of what is committed, so ``S = 0`` is exactly the lock-step
barrier (the caller keeps using :meth:`~mutualrl.see.exchange.ExperienceExchange.wait_for`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mutualrl.see.files import STEP_DIR_RE
from mutualrl.see.shards import complete_shards, scan_committed

if TYPE_CHECKING:
    from mutualrl.see.exchange import ExperienceExchange


@dataclass(frozen=True)
class PeerRound:
    """What one consumer step reads from its peers.

    Attributes:
        step: the trainer step of the consumer (its own published round).
        peer_step: the peers' round it reads (``None``: nothing new within the bound).
        age: exchange rounds between ``step`` and ``peer_step`` (0: lock-step fresh; ``None`` with no data).
        waited: whether the consumer had to wait for a peer more than S rounds behind.
    """

    step: int
    peer_step: int | None
    age: int | None
    waited: bool = False


def is_committed(exchange: ExperienceExchange, policy: str, step: int) -> bool:
    """Whether ``policy`` has committed every rank's shard of ``step`` in this run."""
    found: dict[int, dict[int, object]] = {}
    scan_committed(Path(exchange.root), exchange.run_id, int(step), policy, found, set())
    return complete_shards(found) is not None


def newest_committed(exchange: ExperienceExchange, policy: str) -> int | None:
    """The newest step ``policy`` has fully committed in this run (None: none), scanning step folders newest first."""
    steps = sorted((int(m.group(1)) for entry in os.scandir(exchange.root) if (m := STEP_DIR_RE.match(entry.name))),
                   reverse=True)
    for step in steps:
        if is_committed(exchange, policy, step):
            return step
    return None


def newest_common_round(exchange: ExperienceExchange, peers: Sequence[str], rounds: Sequence[int]) -> int | None:
    """The newest of ``rounds`` (own steps, oldest first) that every peer has committed; None if there is none."""
    for step in reversed(rounds):
        if all(is_committed(exchange, peer, step) for peer in peers):
            return int(step)
    return None


def choose_peer_round(exchange: ExperienceExchange, own_rounds: Sequence[int], peers: Sequence[str], max_staleness: int,
                      last_consumed: int | None) -> PeerRound:
    """The peer round a consumer at ``own_rounds[-1]`` reads under staleness bound ``max_staleness``.

    ``own_rounds`` are the steps at which this policy published, oldest first, ending with the
    current one (peers share the cadence: every policy generates on the same prompts at the same
    steps). Rounds older than ``own_rounds[-1 - S]`` are never used. When some peer has not
    committed that oldest allowed round, this blocks in the exchange's barrier for it
    (:meth:`wait_for`: failure markers and the barrier timeout apply), then picks the newest round
    every peer has. A round not newer than ``last_consumed`` is not read again.
    """
    if max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    step = int(own_rounds[-1])
    window = [int(s) for s in own_rounds[-1 - max_staleness:]]
    waited = False
    if len(own_rounds) > max_staleness:  # a peer more than S rounds behind blocks us
        oldest = window[0]
        # Behind = nothing committed at or after the oldest allowed round (a peer ahead may have pruned it).
        lagging = [p for p in peers if (last := newest_committed(exchange, p)) is None or last < oldest]
        if lagging:
            exchange.wait_for(oldest, policies=lagging)
            waited = True
    newest = newest_common_round(exchange, peers, window)
    if newest is None or (last_consumed is not None and newest <= last_consumed):
        return PeerRound(step, None, None, waited)
    return PeerRound(step, newest, len(window) - 1 - window.index(newest), waited)

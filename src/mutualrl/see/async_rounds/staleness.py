"""Staleness-bounded reads of the SEE: use the newest peer records within S exchange rounds, wait only beyond.

The paper's pools run in lock-step: at exchange round ``i`` (the ``i``-th step at which the
policy generated and published) every policy waits for every peer's records of the same
round. With ``see.max_staleness = S > 0`` a policy at round ``i`` instead takes the newest
round ``e`` that all its active peers have committed, provided ``e >= i - S``, and waits
only while some peer has not yet committed round ``i - S`` (docs/see.md, "Bounded
staleness"). Each peer round is consumed at most once: a round already used yields
nothing new, and the step runs without peer data (standalone).

With ``see.catch_up`` a policy its peers keep waiting for skips rounds (SAPO-style, docs/see.md
"Catching up"): it logs the span it skips (:mod:`mutualrl.see.consumption_log`), and a peer counts a
skipped round as reached (never waited for) but without data. :func:`catch_up_target` is that
decision, a pure function of the policies' round times.

Everything here is file scanning on top of :class:`~mutualrl.see.exchange.ExperienceExchange`;
the choice is a pure function of what is committed, so ``S = 0`` is exactly the lock-step
barrier (the caller keeps using :meth:`~mutualrl.see.exchange.ExperienceExchange.wait_for`).
"""

from __future__ import annotations

import itertools
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mutualrl.see.consumption_log import LogTail
from mutualrl.see.files import STEP_DIR_RE
from mutualrl.see.lockstep import PeerRound
from mutualrl.see.shards import ShardInfo, complete_shards, scan_committed

if TYPE_CHECKING:
    from mutualrl.see.exchange import ExperienceExchange


Committed = dict[tuple[str, int], list[ShardInfo]]
"""(policy, step) -> its committed shards, as one choice of round found them: a round once committed stays so for
the choice, one not yet committed is scanned again."""


def committed_shards(exchange: ExperienceExchange, policy: str, step: int,
                     seen: Committed | None = None) -> list[ShardInfo] | None:
    """Every rank's committed shard of ``step`` by ``policy`` in this run, in rank order (None: not all committed);
    from ``seen`` where an earlier scan of the same choice found them (a scan found is added to it)."""
    if seen is not None and (policy, int(step)) in seen:
        return seen[policy, int(step)]
    found: dict[int, dict[int, ShardInfo]] = {}
    scan_committed(Path(exchange.root), exchange.run_id, int(step), policy, found, set(),
                   worlds=exchange.known_worlds(policy))
    shards = complete_shards(found)
    if seen is not None and shards is not None:
        seen[policy, int(step)] = shards
    return shards


def is_committed(exchange: ExperienceExchange, policy: str, step: int, seen: Committed | None = None) -> bool:
    """Whether ``policy`` has committed every rank's shard of ``step`` in this run."""
    return committed_shards(exchange, policy, step, seen) is not None


def newest_committed(exchange: ExperienceExchange, policy: str, seen: Committed | None = None) -> int | None:
    """The newest step ``policy`` has fully committed in this run (None: none), scanning step folders newest first."""
    steps = sorted((int(m.group(1)) for entry in os.scandir(exchange.root) if (m := STEP_DIR_RE.match(entry.name))),
                   reverse=True)
    for step in steps:
        if is_committed(exchange, policy, step, seen):
            return step
    return None


def has_reached(exchange: ExperienceExchange, policy: str, step: int, log: LogTail | None,
                seen: Committed | None = None) -> bool:
    """Whether ``policy`` committed a round at or after ``step``, or skipped past it (it will never commit it)."""
    if log is not None and log.skipped_past(step):
        return True
    if log is not None and log.rejoined:  # its shards from before the restart stay: only its new lines count
        return log.reached(step)
    newest = newest_committed(exchange, policy, seen)
    return newest is not None and newest >= step


def choose_peer_round(exchange: ExperienceExchange, own_rounds: Sequence[int], peers: Sequence[str], max_staleness: int,
                      last_consumed: int | None, peer_logs: Mapping[str, LogTail] | None = None) -> PeerRound:
    """The peer round a consumer at ``own_rounds[-1]`` reads under staleness bound ``max_staleness``.

    ``own_rounds`` are the rounds this policy trained, oldest first, ending with the current one
    (ages count them: a round it skipped under ``see.catch_up`` updated nothing); peers share the
    cadence, so every policy generates on the same prompts at the same rounds. Rounds older than
    ``own_rounds[-1 - S]`` are never used. When some peer has not reached that oldest allowed
    round, this blocks in the exchange's barrier for it (:meth:`wait_for`: failure markers and
    the barrier timeout apply; a skip in the peer's log counts as arrival), then picks the newest
    round that every peer committed or skipped and at least one committed, with the shards this
    choice found of each peer that committed it (``shards``: the read loads them, no second scan).
    A round not newer than ``last_consumed`` is not read again.
    """
    if max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    logs = peer_logs or {}
    step = int(own_rounds[-1])
    window = [int(s) for s in own_rounds[-1 - max_staleness:]]
    waited = False
    seen: Committed = {}  # a peer's newest round, found while checking that it is not behind, is not scanned again
    if len(own_rounds) > max_staleness:  # a peer more than S rounds behind blocks us
        oldest = window[0]
        lagging = [p for p in peers if not has_reached(exchange, p, oldest, logs.get(p), seen)]
        if lagging:
            exchange.wait_for(oldest, policies=lagging,
                              arrived=lambda p: p in logs and logs[p].skipped_past(oldest))
            waited = True
    for candidate in reversed(window):
        if last_consumed is not None and candidate <= last_consumed:
            break
        found = {p: committed_shards(exchange, p, candidate, seen) for p in peers}
        shards = {p: infos for p, infos in found.items() if infos is not None}
        with_data = tuple(shards)
        skipped = [p for p in peers if p not in shards and p in logs and logs[p].skipped(candidate)]
        if with_data and len(with_data) + len(skipped) == len(peers):
            return PeerRound(step, candidate, len(window) - 1 - window.index(candidate), waited,
                             None if len(with_data) == len(peers) else with_data, shards=shards)
    return PeerRound(step, None, None, waited)


CATCH_UP_RATIO = 1.5
"""A peer counts as persistently faster when its round time is under 1/1.5 of ours: below that, rounds
of unequal length (jitter) are what the staleness bound alone absorbs, and skipping would only cost
training rounds."""


def round_seconds(rows: Sequence[Mapping[str, float]], last: int = 4) -> float | None:
    """A policy's time per trained round from its consumption-log rows (``clock``, else ``time``, and ``wait_s``
    of each): the median of its last ``last`` intervals between decisions, less the time it waited for peers. The
    writer's monotonic ``clock`` never jumps; ``time`` (the wall clock) is read only from rows of older versions."""
    timed = [r for r in rows if r.get("time") is not None]

    def elapsed(a: Mapping[str, float], b: Mapping[str, float]) -> float:
        key = "clock" if a.get("clock") is not None and b.get("clock") is not None else "time"
        return b[key] - a[key]

    intervals = [elapsed(a, b) - float(b.get("wait_s") or 0.0) for a, b in itertools.pairwise(timed)]
    intervals = [i for i in intervals[-last:] if i > 0]
    return statistics.median(intervals) if intervals else None


def catch_up_target(step: int, stride: int, max_staleness: int, own_round_s: float | None,
                    peers: Mapping[str, tuple[int, float | None]]) -> int:
    """The round a policy at round ``step`` should train next so that no faster peer waits for it.

    ``peers`` maps each active peer to (the round it is now working on, its seconds per round);
    rounds are ``stride`` optimizer steps apart. With ``rho`` = our round time / a peer's, the
    peer advances ``rho`` rounds while we do one. If we train round ``j`` now, it is committed
    about when the peer reaches ``f + rho``, and our next one when it reaches ``f + 2 rho``;
    the peer, reading rounds up to ``S`` old, does not wait in between when
    ``j >= f + ceil(2 rho - 1) - S``. Only peers ``CATCH_UP_RATIO`` times faster count. Returns
    ``step`` (train now) or a later round (skip the ones between).
    """
    target = step
    if own_round_s is None or own_round_s <= 0:
        return target
    for current, peer_round_s in peers.values():
        if peer_round_s is None or peer_round_s <= 0 or own_round_s < CATCH_UP_RATIO * peer_round_s:
            continue
        rho = own_round_s / peer_round_s
        ahead = math.ceil(2 * rho - 1) - max_staleness
        target = max(target, int(current) + stride * ahead)
    return target

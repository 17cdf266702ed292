"""One call for a peer round: which round a step reads, from which peers, and their tables.

A regime asks :func:`next_round` for the peers' tables of a step and gets a :class:`Round`; how the round is
chosen is decided here, once per policy, by :func:`open_consumption`: the paper's lock-step
(:class:`~mutualrl.see.lockstep.LockStepConsumption`: every peer's records of this very step, from the shards the
SEE barrier found) or, where the run's ``see`` settings leave lock-step (``see.max_staleness``,
``see.on_peer_failure=continue``, ``see.catch_up``, ``see.replay_consumption``; beyond the paper, docs/see.md
"Bounded staleness"), :class:`~mutualrl.see.async_rounds.consumption.BoundedConsumption`, which may pick an older round,
some peers or none. Every read goes through the exchange's checked shard loader (checksum before read, footer
before inflation, the rows validated once).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mutualrl.see.lockstep import LockStepConsumption, PeerRound

if TYPE_CHECKING:
    import pyarrow as pa

    from mutualrl.see.exchange import ExperienceExchange


@dataclass
class Round:
    """What one step read of its peers."""

    step: int  # the reader's step (its own published round)
    peer_step: int | None  # the peers' round read; None: none this step (off lock-step only: plain GRPO)
    tables: dict[str, pa.Table]  # each peer's columns of ``peer_step`` ({} without a round)
    peers: list[str]  # the peers read this step (off lock-step: those left, with records of the round)
    metrics: dict[str, Any] = field(default_factory=dict)  # off lock-step: mutual/peer_age, mutual/stale, ...
    seconds: dict[str, float] = field(default_factory=dict)  # wait_s, read_s


def open_consumption(exchange: ExperienceExchange, peers: list[str], see: Any, accelerator: Any,
                     args: Any) -> LockStepConsumption:
    """The one place lock-step and bounded staleness are told apart: the consumption of a policy reading ``peers``
    under the run's ``see`` settings (``args``: TRL's GRPO arguments, whose generation length sets the round's
    stride)."""
    if see.max_staleness == 0 and see.on_peer_failure == "stop" and not see.replay_consumption:
        return LockStepConsumption(exchange, peers, accelerator=accelerator)
    from mutualrl.see.async_rounds.consumption import BoundedConsumption

    return BoundedConsumption(exchange, peers, see.max_staleness, see.on_peer_failure, accelerator=accelerator,
                              replay=see.replay_consumption, catch_up=see.catch_up,
                              stride=round_stride(args, see.catch_up))


def next_round(consumption: LockStepConsumption, step: int, columns: tuple[str, ...] | None,
               uses_stale: bool = False, waiting: contextlib.AbstractContextManager[None] | None = None) -> Round:
    """The peers' round step ``step`` reads and their ``columns`` of it. Lock-step: wait at the SEE barrier for
    every peer's round ``step``. Off lock-step: the round the consumption chooses (``waiting`` is entered while
    it waits); an older one only where the reader ``uses_stale`` rounds, and none unless every rank could read it."""
    if consumption.lock_step:
        clock = time.perf_counter()
        found = consumption.next_round(step).shards
        seconds = {"wait_s": time.perf_counter() - clock}
        clock = time.perf_counter()
        tables = {name: consumption.exchange.read_shards(found[name], columns=columns) for name in consumption.peers}
        seconds["read_s"] = time.perf_counter() - clock
        return Round(step, step, tables, list(consumption.peers), seconds=seconds)
    return _bounded_round(consumption, step, columns, uses_stale, waiting or contextlib.nullcontext())


def _bounded_round(consumption: LockStepConsumption, step: int, columns: tuple[str, ...] | None, uses_stale: bool,
                   waiting: contextlib.AbstractContextManager[None]) -> Round:
    """:func:`next_round` off lock-step."""
    from mutualrl.see.errors import ShardMissingError

    clock = time.perf_counter()
    with waiting:  # with every peer gone this is plain GRPO, unless one rejoins
        chosen = consumption.next_round(step)
    # this step's peers: the active ones with records of the round read (a peer may have skipped it)
    peers = list(consumption.active if chosen.peers is None else chosen.peers)
    seconds = {"wait_s": time.perf_counter() - clock}
    peer_step = chosen.peer_step
    if peer_step is not None and peer_step != step and not uses_stale:
        peer_step = None  # an older round this reader cannot use: do not read it
    metrics = round_metrics(chosen, peer_step, len(consumption.active))
    if peer_step is None:
        return Round(step, None, {}, peers, metrics, seconds)
    clock = time.perf_counter()
    try:
        tables = read_round(consumption.exchange, peers, chosen, peer_step, columns)
    except ShardMissingError:
        tables = None  # pruned by a peer that ran ahead after dropping us, maybe after another rank read it
    if not read_on_every_rank(consumption.accelerator, tables is not None):
        return Round(step, None, {}, peers, metrics, seconds)  # on every rank alike: a transform holds collectives
    seconds["read_s"] = time.perf_counter() - clock
    return Round(step, peer_step, tables, peers, metrics, seconds)


def read_round(exchange: ExperienceExchange, peers: list[str], chosen: PeerRound, peer_step: int,
               columns: tuple[str, ...] | None) -> dict[str, pa.Table]:
    """The ``peers``' tables of round ``peer_step``, loaded from the shards the choice found (``chosen.shards``: rank
    0's choice, a replay's wait); a rank > 0, which read rank 0's decision from the log, scans for them.
    :class:`~mutualrl.see.errors.ShardMissingError` when a peer pruned the round in between."""
    from mutualrl.see.errors import CorruptShardError, ShardMissingError

    found = chosen.shards or {}
    tables = {}
    for name in peers:
        if name not in found:
            tables[name] = exchange.read(peer_step, name, columns=columns)
            continue
        try:
            tables[name] = exchange.read_shards(found[name], columns=columns)
        except CorruptShardError as err:  # a data file gone with its manifest: pruned (manifest first), not corrupt
            if err.problem != "missing" or all(info.manifest_path.exists() for info in found[name]):
                raise
            raise ShardMissingError(f"SEE: policy {name!r} pruned its shards of step {peer_step} before they were "
                                    "read", peer=name, step=peer_step) from None
    return tables


def read_on_every_rank(accelerator: Any, read: bool) -> bool:
    """Whether every rank of this policy read the round (``read`` is this rank's; a collective with several ranks)."""
    if accelerator is None or accelerator.num_processes == 1:
        return read
    import torch

    missed = torch.tensor(0 if read else 1, device=accelerator.device)  # [] ranks that missed it, this one's
    return int(accelerator.reduce(missed, reduction="sum").item()) == 0


def round_metrics(chosen: PeerRound, used_step: int | None, active: int) -> dict[str, Any]:
    """The staleness metrics of one step: peers left, whether it got data, how old, whether it was used."""
    got = chosen.peer_step is not None
    values: dict[str, Any] = {"mutual/peers_active": active, "mutual/peer_data": got}
    if got:
        values.update({"mutual/peer_age": chosen.age, "mutual/stale": chosen.age > 0,
                       "mutual/stale_used": used_step is not None})
    values["mutual/waited"] = chosen.waited
    return values


def round_stride(args: Any, required: bool) -> int:
    """Optimizer steps between two exchange rounds (one generation): ``steps_per_generation * num_iterations /
    gradient_accumulation_steps`` of TRL's GRPO arguments ``args``. Skipping whole rounds (``required``) needs it to
    be a whole number."""
    from mutualrl.errors import UsageError

    generate_every = args.steps_per_generation * args.num_iterations
    stride, rest = divmod(generate_every, args.gradient_accumulation_steps)
    if stride >= 1 and rest == 0:
        return stride
    if required:
        raise UsageError(
            f"see.catch_up skips whole rounds, so a generation must span whole optimizer steps: "
            f"steps_per_generation x num_iterations ({generate_every}) must be a multiple of "
            f"gradient_accumulation_steps ({args.gradient_accumulation_steps})")
    return 1

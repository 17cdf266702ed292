"""A regime's peer reads outside lock-step (beyond the paper; optional; docs/see.md "Bounded staleness").

:class:`~mutualrl.regimes.adapter.RegimeAdapter` reads the paper's lock-step round itself: every peer's
records of this step. Only when the run's ``see`` settings leave lock-step (``see.max_staleness``,
``see.on_peer_failure=continue``, ``see.catch_up``, ``see.replay_consumption``) does it hand the read to
:func:`read_bounded_round`, which asks :class:`~mutualrl.see.offlock.consumption.BoundedConsumption` which
round to read (maybe an older one, maybe none), from which peers (some may have left or skipped it), and
logs the staleness metrics. A regime uses an older round only where it declares ``uses_stale_rounds``
(SGT: :meth:`~mutualrl.regimes.adapter.RegimeAdapter.transform_stale`).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any, Protocol

from mutualrl.regimes.seam import GRPOArgsView, GRPOBatch, StepRollouts, TrainerView

if TYPE_CHECKING:
    import pyarrow as pa

    from mutualrl.see.exchange import ExperienceExchange
    from mutualrl.see.lockstep import LockStepConsumption, PeerRound
    from mutualrl.see.offlock.consumption import BoundedConsumption


class PeerReader(Protocol):
    """What this module reads and sets of a :class:`~mutualrl.regimes.adapter.RegimeAdapter` (declared here, so
    that the adapter imports this module and not the other way round)."""

    config: Any
    exchange: ExperienceExchange | None
    peers: list[str]
    consumption: LockStepConsumption | None  # off lock-step: a BoundedConsumption
    trainer: TrainerView | None
    peer_columns: tuple[str, ...] | None
    uses_stale_rounds: bool

    def remember(self, output: GRPOBatch, rollouts: StepRollouts) -> None: ...

    def phase(self, name: str) -> contextlib.AbstractContextManager[None]: ...


def bounded_consumption(adapter: PeerReader, trainer: TrainerView) -> BoundedConsumption:
    """The consumption of ``adapter``'s policy under the run's off-lock-step ``see`` settings."""
    from mutualrl.see.offlock.consumption import BoundedConsumption

    see = adapter.config.see
    return BoundedConsumption(adapter.exchange, adapter.peers, see.max_staleness, see.on_peer_failure,
                              accelerator=trainer.accelerator, replay=see.replay_consumption, catch_up=see.catch_up,
                              stride=round_stride(trainer.args, see.catch_up))


def read_bounded_round(adapter: PeerReader, output: GRPOBatch, rollouts: StepRollouts,
                       timings: dict[str, float]) -> tuple[int | None, dict[str, pa.Table]]:
    """The peer round step ``rollouts.step`` uses under the bound (``None``: none; plain GRPO this step) and the
    peers' tables of it. The regime first keeps what a later step may need of this one (:meth:`remember`)."""
    from mutualrl.see.errors import ShardMissingError

    adapter.remember(output, rollouts)
    consumption, step = adapter.consumption, rollouts.step
    clock = time.perf_counter()
    with adapter.phase("waiting for peers"):  # with every peer gone this is plain GRPO, unless one rejoins
        chosen = consumption.next_round(step)
    # this step's peers: the active ones with records of the round read (a peer may have skipped it)
    adapter.peers = list(consumption.active if chosen.peers is None else chosen.peers)
    timings["wait_s"] = time.perf_counter() - clock
    peer_step = chosen.peer_step
    if peer_step is not None and peer_step != step and not adapter.uses_stale_rounds:
        peer_step = None  # an older round this regime cannot use: do not read it
    log_round(adapter.trainer, chosen, peer_step, len(consumption.active))
    if peer_step is None:
        return None, {}
    clock = time.perf_counter()
    try:
        peers = read_round(adapter, chosen, peer_step)
    except ShardMissingError:
        peers = None  # pruned by a peer that ran ahead after dropping us, maybe after another rank read it
    if not read_on_every_rank(adapter.trainer.accelerator, peers is not None):
        return None, {}  # no peer data this step, on every rank alike: a regime's transform holds collectives
    timings["read_s"] = time.perf_counter() - clock
    return peer_step, peers


def read_round(adapter: PeerReader, chosen: PeerRound, peer_step: int) -> dict[str, pa.Table]:
    """The peers' tables of round ``peer_step``, loaded from the shards the choice found (``chosen.shards``: rank 0's
    choice, a replay's wait); a rank > 0, which read rank 0's decision from the log, scans for them.
    :class:`ShardMissingError` when a peer pruned the round in between."""
    from mutualrl.see.errors import CorruptShardError, ShardMissingError

    exchange, columns, found = adapter.exchange, adapter.peer_columns, chosen.shards or {}
    tables = {}
    for name in adapter.peers:
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
    if accelerator.num_processes == 1:
        return read
    import torch

    missed = torch.tensor(0 if read else 1, device=accelerator.device)  # [] ranks that missed it, this one's
    return int(accelerator.reduce(missed, reduction="sum").item()) == 0


def log_round(trainer: TrainerView, chosen: PeerRound, used_step: int | None, active: int) -> None:
    """The staleness metrics of one step: peers left, whether it got data, how old, whether it was used."""
    got = chosen.peer_step is not None
    values = {"mutual/peers_active": active, "mutual/peer_data": got}
    if got:
        values.update({"mutual/peer_age": chosen.age, "mutual/stale": chosen.age > 0,
                       "mutual/stale_used": used_step is not None})
    values["mutual/waited"] = chosen.waited
    trainer.record_metrics(values)


def round_stride(args: GRPOArgsView, required: bool) -> int:
    """Optimizer steps between two exchange rounds (one generation): ``steps_per_generation * num_iterations /
    gradient_accumulation_steps``. Skipping whole rounds (``required``) needs it to be a whole number."""
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

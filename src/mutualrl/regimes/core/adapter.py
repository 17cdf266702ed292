"""The base of every regime's adapter between TRL's batch and the regime's pure maths.

Each regime's own adapter (``regimes/<name>/adapter.py``) subclasses :class:`RegimeAdapter`. The
trainer (:class:`~mutualrl.training.trainer.MutualGRPOTrainer`) calls :meth:`RegimeAdapter.process_step`
once per generation step with TRL's batch (:class:`~mutualrl.regimes.core.trainer_interface.GRPOBatch`) and this policy's
:class:`~mutualrl.regimes.core.trainer_interface.StepRollouts`.
The adapter

1. publishes this rank's rollout records to the SEE (all regimes but a silent standalone),
2. waits for and reads the peer columns its regime names (``peer_columns``; the paper's SEE paragraph has
   XGRPO subscribe to scalar rewards, SGT to verified successful responses, PRP to rollout text and behaviour
   traces; the SEE does not filter rows, so SGT reads six columns of every peer row (prompt id, sample
   index, reward, text, finished flag, length) and finds the successes itself),
3. calls the regime's pure function and writes the result back into TRL's batch,
4. logs the regime's metrics under ``<regime>/<metric>``,
5. prunes its old SEE rounds.

:meth:`RegimeAdapter.process_step` runs these stages in that order, one method each. The math lives in
each regime's ``maths.py``; this module only moves tensors around. It uses the SEE and THL (same layer)
and sees the trainer only through :class:`~mutualrl.regimes.core.trainer_interface.TrainerView` (a typed protocol at this
layer), so no import goes up to ``training/``; it imports torch, so only the training layer imports it
(:func:`mutualrl.training.adapters.make_regime_adapter`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from mutualrl.regimes.core.regime_spec import RegimeSpec
from mutualrl.regimes.core.registry import get_regime
from mutualrl.regimes.core.trainer_interface import TOKEN_WEIGHTS, GRPOBatch, StepRollouts, TrainerView

if TYPE_CHECKING:
    import pyarrow as pa

    from mutualrl.see.exchange import ExperienceExchange
    from mutualrl.see.lockstep import LockStepConsumption
    from mutualrl.see.records import RolloutBatch


BASE_REGIME = "standalone"
"""The regime of the base adapter when it is built without a spec."""


class RegimeAdapter:
    """Standalone GRPO: no peer fields; optionally publishes records for inspection."""

    spec: RegimeSpec
    """The regime this adapter runs (its name prefixes the metrics): a regime's adapter names its own, and
    :func:`~mutualrl.training.adapters.make_regime_adapter` sets it per instance from the registry; the base adapter
    built without one runs standalone GRPO (looked up, so that the core imports no regime folder)."""
    publishes_traces = False
    publishes_spans = False
    """Whether this policy publishes each token's character span (THL): declared by a regime whose readers need the
    peers' spans (PRP's peer denominator); otherwise the column is null and only the text is decoded."""
    text_byte_limits: Any = None
    """A ``CoverLimits``: this policy publishes each byte's log-prob given its text before, over its tokenizations
    within these limits (the SEE record's ``text_byte_logps``); declared by a regime whose readers compare texts
    (PRP's F-TIS). None: not published."""
    peer_columns: tuple[str, ...] | None = None
    uses_stale_rounds: ClassVar[bool] = False
    """Whether the regime implements :meth:`transform_stale` (declared, not detected): only then is a peer round
    older than this step read under ``see.max_staleness > 0`` (:func:`mutualrl.see.rounds.next_round`); otherwise
    such a step is plain GRPO."""

    def __init__(self, config: Any, policy: str, exchange: ExperienceExchange | None = None,
                 spec: RegimeSpec | None = None):
        if spec is not None:
            self.spec = spec
        elif not hasattr(self, "spec"):
            self.spec = get_regime(BASE_REGIME)
        self.config = config
        self.policy = policy
        self.exchange = exchange
        self.peers = [p.name for p in config.pool.policies if p.name != policy]
        self.trainer: TrainerView | None = None  # set by bind()
        self.consumption: LockStepConsumption | None = None  # set by bind() where the regime reads peers
        self.phase_hook: Callable[[str], None] | None = None  # set by the worker: writes the status phase
        self.peers_scored = False  # a peer row this step read scored above 0 (the no-reward stop waits then)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def needs_peers(self) -> bool:
        return self.spec.needs_peers

    @property
    def pool_order(self) -> list[str]:
        """Every policy of the pool, in the recipe's order (the ``M`` axis of a pool tensor)."""
        return [p.name for p in self.config.pool.policies]

    @property
    def settings(self) -> Any:
        """This regime's settings, typed by its spec: the ``spec.settings`` dataclass the recipe's
        ``regime.<settings_key>`` built (None for a regime without settings). A variant registers its own key with a
        subclass of its parent's settings dataclass, so the parent's adapter code reads the variant's values."""
        key = self.spec.settings_key
        return None if key is None else getattr(self.config.regime, key)

    def bind(self, trainer: TrainerView) -> None:
        """Bind to the trainer; a regime that reads peers gets its consumption of the SEE (the paper's lock-step
        barrier, or the optional bounded staleness the ``see`` settings ask for: :func:`mutualrl.see.rounds.
        open_consumption` decides). A ``lock_step_only`` regime refuses any other (the recipe's check refused it
        already, :func:`mutualrl.config.validate.validate_run_config`: this holds for a config built around it)."""
        self.trainer = trainer
        if self.needs_peers and self.exchange is not None:
            from mutualrl.see.rounds import open_consumption

            self.consumption = open_consumption(self.exchange, self.peers, self.config.see, trainer.accelerator,
                                                trainer.args)
            if self.spec.lock_step_only and not self.consumption.lock_step:
                from mutualrl.errors import UsageError

                raise UsageError(f"regime {self.name!r} needs every peer's records of the same round: it runs "
                                 "lock-step only (see.max_staleness 0, see.on_peer_failure stop, no "
                                 "see.replay_consumption)")

    # -- per step: the stages, top to bottom ------------------------------------------------
    def process_step(self, output: GRPOBatch, rollouts: StepRollouts) -> GRPOBatch:
        """One generation step of the regime (paper, "Dataflow in One Training Loop"): publish this rank's
        records, read the peers' round, rewrite TRL's batch, log, prune. Returns the (rewritten) batch."""
        timings: dict[str, float] = {}  # seconds per stage, logged as mutual/<stage>_s
        self.publish_records(output, rollouts, timings)
        peer_step, peers = self.read_peers(output, rollouts, timings)
        self.peers_scored = any_scored(peers)
        output, metrics = self.apply_regime(output, rollouts, peers, peer_step, timings)
        self.log_step(metrics, timings)
        self.prune_records(rollouts.step)
        return output

    def publish_records(self, output: GRPOBatch, rollouts: StepRollouts, timings: dict[str, float]) -> None:
        """Publish this rank's records to the SEE (nothing without an exchange: a silent standalone)."""
        if self.exchange is None:
            return
        clock = time.perf_counter()
        if self.publishes_traces:
            self.ensure_behaviour_logps(output)
        records = self.build_records(output, rollouts)
        timings["build_s"] = time.perf_counter() - clock
        clock = time.perf_counter()
        self.exchange.publish(rollouts.step, records)
        timings["publish_s"] = time.perf_counter() - clock

    def read_peers(self, output: GRPOBatch, rollouts: StepRollouts,
                   timings: dict[str, float]) -> tuple[int | None, dict[str, pa.Table]]:
        """The peer round this step uses and the peers' tables of it (``{}`` for a regime that reads none), in one
        call of the SEE (:func:`mutualrl.see.rounds.next_round`): lock-step, this step's round; off lock-step maybe an
        older one (only for a regime that ``uses_stale_rounds``, which first keeps what a later step needs of this one:
        :meth:`remember`) or none (``None``: plain GRPO this step)."""
        if not self.needs_peers:
            return rollouts.step, {}
        from mutualrl.see.rounds import next_round

        if not self.consumption.lock_step:
            self.remember(output, rollouts)
        read = next_round(self.consumption, rollouts.step, self.peer_columns, uses_stale=self.uses_stale_rounds,
                          waiting=self.phase("waiting for peers"))
        self.peers = read.peers
        timings.update(read.seconds)
        if read.metrics:
            self.trainer.record_metrics(read.metrics)
        return read.peer_step, read.tables

    def apply_regime(self, output: GRPOBatch, rollouts: StepRollouts, peers: dict[str, pa.Table],
                     peer_step: int | None, timings: dict[str, float]) -> tuple[GRPOBatch, dict[str, float]]:
        """The regime's rewrite of TRL's batch with the round ``peer_step``: this step's (:meth:`transform`); off
        lock-step an earlier one (:meth:`transform_stale`) or none (plain GRPO: no peer left, nothing new)."""
        clock = time.perf_counter()
        if peer_step == rollouts.step:
            output, metrics = self.transform(output, rollouts, peers)
        elif peer_step is not None:
            output, metrics = self.transform_stale(output, rollouts, peers, peer_step)
        else:
            metrics = {}
        timings["transform_s"] = time.perf_counter() - clock
        return output, metrics

    def log_step(self, metrics: dict[str, float], timings: dict[str, float]) -> None:
        """The regime's metrics as ``<regime>/<metric>``, the stages' seconds as ``mutual/<stage>_s``."""
        self.trainer.record_metrics({f"{self.name}/{key}": value for key, value in metrics.items()})
        self.trainer.record_metrics({f"mutual/{key}": value for key, value in timings.items()})

    def prune_records(self, step: int) -> None:
        """Drop this policy's old SEE rounds; under bounded staleness a peer may still read back to the window's
        oldest round."""
        if self.exchange is not None:
            self.exchange.prune(self.consumption.own_rounds[0] if self.needs_peers else step)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Show ``name`` as this policy's phase while inside (the launcher counts a phase change as progress,
        so a long wait for peers is not taken for a stall)."""
        if self.phase_hook is None:
            yield
            return
        self.phase_hook(name)
        try:
            yield
        finally:
            self.phase_hook("training")

    # -- the hooks a regime implements --------------------------------------------------------
    def transform(self, output: GRPOBatch, rollouts: StepRollouts,
                  peers: dict[str, pa.Table]) -> tuple[GRPOBatch, dict[str, float]]:
        """Rewrite TRL's batch with the peers' tables of this step; returns it and the regime's metrics."""
        return output, {}

    def remember(self, output: GRPOBatch, rollouts: StepRollouts) -> None:
        """Keep what :meth:`transform_stale` needs of this step (off lock-step only: each step, before reading)."""

    def transform_stale(self, output: GRPOBatch, rollouts: StepRollouts, peers: dict[str, pa.Table],
                        peer_step: int) -> tuple[GRPOBatch, dict[str, float]]:
        """Use peer records of an earlier round (``see.max_staleness > 0``); called only where the regime
        declares ``uses_stale_rounds = True`` (XGRPO and PRP cannot: they pair peer rows with the same prompts)."""
        return output, {}

    def extra_loss(self, model: torch.nn.Module, inputs: GRPOBatch) -> torch.Tensor | None:
        """An auxiliary loss term for this micro-batch (SGT's λ·NLL), or None."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """What this regime carries from one step to the next and a resumed run needs to go on as an uninterrupted
        one would (HACPO's capability window, SGT's rescue counter); ``{}``: nothing (a regime whose every step
        follows from that step's batch, its peers' round and :meth:`seeded_generator`). JSON values only (numbers,
        strings, booleans, None, lists, string-keyed dicts; exact for floats), the same on every rank of the policy:
        the trainer saves it with each checkpoint (``training/regime_state.py``, rank 0) and hands it to
        :meth:`load_state_dict` on every rank of a run resumed from it."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take back what :meth:`state_dict` returned at the checkpoint a run resumes from, before its first resumed
        step. The default keeps nothing."""

    def token_weights(self, inputs: GRPOBatch) -> torch.Tensor | None:
        """Per-token weights ``[B, T]`` (finite, >= 0) that multiply this micro-batch's per-token policy loss, or
        None (no weighting: TRL's loss untouched). By default the ``TOKEN_WEIGHTS`` rows a regime put into the batch
        in :meth:`transform` (TRL shuffles and splits them with the other rows); the trainer applies them once
        (:func:`mutualrl.training.trainer.weighted_advantages`)."""
        return inputs.get(TOKEN_WEIGHTS)

    # -- helpers --------------------------------------------------------------------------
    def seeded_generator(self, step: int, *parts: Any) -> torch.Generator:
        """A random generator seeded by (the run's seed, ``step``, this policy, ``parts``): the same draw on every rank
        and on a rerun, without touching the global RNG streams (SGT's choice of a success, randpert's noise)."""
        return torch.Generator().manual_seed(stable_seed(self.trainer.args.seed, step, self.policy, *parts))

    def ensure_behaviour_logps(self, output: GRPOBatch) -> None:
        """Make sure ``old_per_token_logps`` (the behaviour trace) exists in the batch.

        TRL skips it when generation and optimisation are aligned (it then uses the detached
        current log-probs, which are the same numbers). Regimes that publish traces need it.
        """
        if output.get("old_per_token_logps") is not None:
            return
        trainer = self.trainer
        with torch.no_grad():
            output["old_per_token_logps"] = trainer.score_completions(
                trainer.model, output["prompt_ids"], output["prompt_mask"],
                output["completion_ids"], output["completion_mask"],
            )

    def build_records(self, output: GRPOBatch, rollouts: StepRollouts) -> RolloutBatch:
        """This rank's rollout records for the SEE (:func:`mutualrl.regimes.core.publication.rollout_records`), with the
        behaviour traces and token spans where this regime's readers need them."""
        from mutualrl.regimes.core.publication import rollout_records

        return rollout_records(output, rollouts, self.trainer, traces=self.publishes_traces,
                               spans=self.publishes_spans, text_byte_limits=self.text_byte_limits)


def stable_seed(*parts: Any) -> int:
    """A seed derived from (run seed, step, policy...) that does not touch the global RNG streams."""
    import hashlib

    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def any_scored(peers: dict[str, pa.Table]) -> bool:
    """Whether a row of the peers' tables has a reward above 0 (NaN, not scored, is not)."""
    import pyarrow.compute as pc

    return any("reward" in table.column_names and table.num_rows and (pc.max(table["reward"]).as_py() or 0) > 0
               for table in peers.values())

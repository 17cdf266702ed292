"""The base of every regime's adapter between TRL's batch and the regime's pure maths.

Each regime's own adapter (``regimes/<name>/adapter.py``) subclasses :class:`RegimeAdapter`. The
trainer (:class:`~mutualrl.training.trainer.MutualGRPOTrainer`) calls :meth:`RegimeAdapter.process_step`
once per generation step with TRL's batch dict and this policy's :class:`~mutualrl.training.trainer.StepRollouts`. The adapter

1. publishes this rank's rollout records to the SEE (all regimes but a silent standalone),
2. waits for and reads the peer fields its regime subscribes to (paper, SEE paragraph:
   XGRPO subscribes to scalar rewards, SGT to verified successful responses, PRP to rollout
   text and behaviour traces),
3. calls the regime's pure function and writes the result back into TRL's batch,
4. logs the regime's metrics under ``<regime>/<metric>``.

The math lives in each regime's ``maths.py``; this module only moves tensors around. It uses the
SEE and THL (same layer) and reads the trainer by duck typing, so no import goes up to ``training/``;
it imports torch, so only the training layer imports it
(:func:`mutualrl.training.adapters.make_regime_adapter`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from mutualrl.regimes.registry import RegimeSpec
from mutualrl.regimes.standalone.spec import STANDALONE


def log_trl_metrics(trainer: Any, values: Mapping[str, float], mode: str = "train") -> None:
    """Append ``values`` to TRL's per-step metric lists (its private ``_metrics``; TRL averages each list
    into the logged row): the one place mutualrl writes them."""
    metrics = trainer._metrics[mode]
    for key, value in values.items():
        metrics[key].append(float(value))


class RegimeAdapter:
    """Standalone GRPO: no peer fields; optionally publishes records for inspection."""

    spec: RegimeSpec = STANDALONE
    """The regime this adapter runs (its name prefixes the metrics); set per instance by
    :func:`~mutualrl.training.adapters.make_regime_adapter` from the registry."""
    publishes_traces = False
    peer_columns: tuple[str, ...] | None = None

    def __init__(self, config: Any, policy: str, exchange: Any = None, spec: RegimeSpec | None = None):
        if spec is not None:
            self.spec = spec
        self.config = config
        self.policy = policy
        self.exchange = exchange
        self.peers = [p.name for p in config.pool.policies if p.name != policy]
        self.trainer: Any = None
        self.consumption: Any = None
        self.phase_hook: Callable[[str], None] | None = None  # set by the worker: writes the status phase

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def needs_peers(self) -> bool:
        return self.spec.needs_peers

    def bind(self, trainer: Any) -> None:
        self.trainer = trainer
        if self.needs_peers and self.exchange is not None:
            from mutualrl.see.consumption import PeerConsumption

            see = self.config.see
            self.consumption = PeerConsumption(self.exchange, self.peers, see.max_staleness, see.on_peer_failure,
                                               accelerator=trainer.accelerator, replay=see.replay_consumption,
                                               catch_up=see.catch_up, stride=round_stride(trainer.args,
                                                                                          see.catch_up))

    def skip_round(self, step: int) -> bool:
        """Whether this policy skips the exchange round starting at optimizer step ``step`` (``see.catch_up``:
        no generation, no update; docs/see.md "Catching up"). Called by the trainer at each round's start."""
        if self.consumption is None or not self.consumption.may_skip:
            return False
        skipped = self.consumption.skip_round(step, self.trainer.state.max_steps)
        log_trl_metrics(self.trainer, {"mutual/skipped": skipped})
        return skipped

    # -- per step -------------------------------------------------------------------------
    def process_step(self, output: dict[str, Any], rollouts: Any) -> dict[str, Any]:
        timings: dict[str, float] = {}
        clock = time.perf_counter()
        if self.exchange is not None:
            if self.publishes_traces:
                self.ensure_behaviour_logps(output)
            records = self.build_records(output, rollouts)
            timings["build_s"] = time.perf_counter() - clock
            clock = time.perf_counter()
            self.exchange.publish(rollouts.step, records)
            timings["publish_s"] = time.perf_counter() - clock
        peers: dict[str, Any] = {}
        peer_step: int | None = rollouts.step
        if self.needs_peers:
            self.remember(output, rollouts)
            peer_step, peers = self.read_peer_round(rollouts.step, timings)
        clock = time.perf_counter()
        if peer_step == rollouts.step:
            output, metrics = self.transform(output, rollouts, peers)
        elif peer_step is not None:
            output, metrics = self.transform_stale(output, rollouts, peers, peer_step)
        else:  # no peer left, or nothing new within the staleness bound: plain GRPO this step
            metrics = {}
        timings["transform_s"] = time.perf_counter() - clock
        log_trl_metrics(self.trainer, {f"{self.name}/{key}": value for key, value in metrics.items()})
        log_trl_metrics(self.trainer, {f"mutual/{key}": value for key, value in timings.items()})
        if self.exchange is not None:
            # Under bounded staleness a peer may still read our rounds back to the window's oldest.
            self.exchange.prune(self.consumption.own_rounds[0] if self.needs_peers else rollouts.step)
        return output

    def read_peer_round(self, step: int, timings: dict[str, float]) -> tuple[int | None, dict[str, Any]]:
        """The peer round this step uses (see.max_staleness; lock-step: ``step``) and the peers' tables of it."""
        from mutualrl.see.errors import ShardMissingError

        consumption = self.consumption
        clock = time.perf_counter()
        # With every peer gone (see.on_peer_failure=continue) this is plain GRPO, unless one rejoins.
        with self.phase("waiting for peers", enabled=not consumption.lock_step):
            chosen = consumption.next_round(step)
        # this step's peers: the active ones with records of the round read (a peer may have skipped it)
        self.peers = list(consumption.active if chosen.peers is None else chosen.peers)
        timings["wait_s"] = time.perf_counter() - clock
        peer_step = chosen.peer_step
        if peer_step is not None and peer_step != step and not self.uses_stale_rounds:
            peer_step = None  # an older round this regime cannot use: do not read it
        self._log_round(chosen, peer_step)
        if peer_step is None:
            return None, {}
        clock = time.perf_counter()
        try:
            peers = {name: self.exchange.read(peer_step, name, columns=self.peer_columns) for name in self.peers}
        except ShardMissingError:
            if consumption.lock_step:
                raise
            return None, {}  # pruned by a peer that ran ahead after dropping us: no peer data this step
        timings["read_s"] = time.perf_counter() - clock
        return peer_step, peers

    @property
    def uses_stale_rounds(self) -> bool:
        return type(self).transform_stale is not RegimeAdapter.transform_stale

    @contextlib.contextmanager
    def phase(self, name: str, enabled: bool = True) -> Iterator[None]:
        """Show ``name`` as this policy's phase while inside (the launcher counts a phase change as progress,
        so a long wait for peers is not taken for a stall)."""
        if not enabled or self.phase_hook is None:
            yield
            return
        self.phase_hook(name)
        try:
            yield
        finally:
            self.phase_hook("training")

    def _log_round(self, chosen: Any, used_step: int | None) -> None:
        """Staleness metrics (only off the lock-step path, whose age is always 0)."""
        if self.consumption.lock_step:
            return
        got = chosen.peer_step is not None
        values = {"mutual/peers_active": len(self.consumption.active), "mutual/peer_data": got}
        if got:
            values.update({"mutual/peer_age": chosen.age, "mutual/stale": chosen.age > 0,
                           "mutual/stale_used": used_step is not None})
        values["mutual/waited"] = chosen.waited
        log_trl_metrics(self.trainer, values)

    def transform(self, output: dict[str, Any], rollouts: Any, peers: dict[str, Any]):
        return output, {}

    def remember(self, output: dict[str, Any], rollouts: Any) -> None:
        """Keep what :meth:`transform_stale` needs of this step (called every step, before any transform)."""

    def transform_stale(self, output: dict[str, Any], rollouts: Any, peers: dict[str, Any], peer_step: int):
        """Use peer records of an earlier round (``see.max_staleness > 0``). Not overridden: the regime cannot
        (XGRPO and PRP pair peer rows with the same prompts), the round is not read and the step is plain GRPO."""
        return output, {}

    def extra_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor | None:
        return None

    # -- helpers --------------------------------------------------------------------------
    def ensure_behaviour_logps(self, output: dict[str, Any]) -> None:
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

    def build_records(self, output: dict[str, Any], rollouts: Any) -> Any:
        """This rank's rollout records for the SEE (text + token spans via THL)."""
        from mutualrl.see.schema import RolloutBatch
        from mutualrl.thl import batch_decode_with_spans

        trainer = self.trainer
        decoded = batch_decode_with_spans(trainer.processing_class, rollouts.completion_ids_local)
        logps = output.get("old_per_token_logps") if self.publishes_traces else None
        behaviour = None
        if logps is not None:
            mask = output["completion_mask"].bool()
            behaviour = [logps[i][mask[i]].float().cpu().numpy() for i in range(logps.size(0))]
        eos = set(trainer.eos_token_ids)
        prompts = [_prompt_text(p) for p in rollouts.prompt_texts_local]
        return RolloutBatch(
            step=rollouts.step,
            policy=self.policy,
            rank=rollouts.process_index,
            prompt_id=rollouts.prompt_ids_local,
            sample_index=rollouts.sample_index_local,
            prompt_text=prompts,
            response_text=[d.text for d in decoded],
            response_token_ids=[list(ids) for ids in rollouts.completion_ids_local],
            response_token_spans=[d.spans for d in decoded],
            reward=rollouts.rewards_local.float().numpy(),
            advantage=output["advantages"].float().cpu().numpy(),
            behaviour_logps=behaviour,
            finished=[bool(ids) and ids[-1] in eos for ids in rollouts.completion_ids_local],
        )


def round_stride(args: Any, required: bool) -> int:
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


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        return str(prompt[-1].get("content", ""))
    return str(prompt)

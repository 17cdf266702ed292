"""HACPO's adapter (arXiv 2603.02604): PRP's pooled batch with HACPO's advantages and peer-row weights.

The peer rows reach the learner as PRP's do (:class:`~mutualrl.regimes.core.pooled_rows.PooledRowsAdapter`: retokenized
into the learner's vocabulary, with the peers' THL-aligned traces). What HACPO decides, in the hooks the pooled rows
offer and its own term:

- the advantages of every row, own and peers' (Sec. 3.1): :meth:`HACPOAdapter._pooled_advantages`, which also
  keeps each policy's capability over the last ``capability_window`` steps (Eq. 9), saved with
  each checkpoint (:meth:`HACPOAdapter.state_dict`);
- the denominator of TRL's ratio: the learner's snapshot on every row (the pooled rows' default), so TRL's
  sequence-level ratio is GSPO's own on the learner's rows;
- the peer rows leave TRL's loss (its ``tool_mask`` is 0 on them: no policy term, no KL, no entropy bonus, no
  token in its per-micro-batch sums) and get Eq. 50 as this regime's own term (:meth:`extra_loss`), computed from
  the log-probs of TRL's own forward at every parameter update: the discrepancy coefficient (Sec. 3.2),
  ``sg[s]^α`` (Sec. 3.3) and the clip band, whose lower bound rises with each update of the step (Sec. 3.4), on the
  current ``s``, the peer row's sequence ratio (the learner's mean token log-prob minus the peer's over its own
  tokens, the authors' ``source_mean_logp``; the peer's total read from its aligned trace); the KL term on own rows
  only, as the authors' code (``kl_on_peer_rows``); beyond the paper, TIS's cap on ``s``;
- the loss's normaliser (:meth:`standalone_normaliser`): every row weighs what a row of the learner's standalone
  batch weighs, as in the authors' code, whose own and peer rows are each a mean over a standalone-sized mini-batch;
  TRL's reduction would count the peer rows' places too and scale the own rows' gradient by ``B / (B + N)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

import torch

from mutualrl.regimes.api import (
    AppendedRows,
    GRPOBatch,
    PeerGroups,
    PooledRowsAdapter,
    PooledStep,
    Quantile,
    Share,
    StepRollouts,
    loss_types_where,
)
from mutualrl.regimes.hacpo.spec import HACPO, HACPOSettings

if TYPE_CHECKING:
    import pyarrow as pa

PEER_LOGPS: Final = "hacpo_peer_logps"
"""Batch rows ``[B, T]``: a peer row's behaviour log-probs on the learner's tokens (the peer's THL-aligned trace,
Eq. 11's denominator); the learner's snapshot on own rows (not read)."""
COEFFICIENT: Final = "hacpo_coefficient"
"""Batch rows ``[B]``: a peer row's discrepancy coefficient ``ω(j, k)`` (Eq. 10, or 1 when off); 1 on own rows."""
SOURCE_TOKENS: Final = "hacpo_source_tokens"
"""Batch rows ``[B]``: a peer row's count of its source's own tokens (Eq. 11's source mean divides by it, as the
authors' ``source_mean_logp``); the row's own completion tokens on own rows (not read)."""
PEER_ROW: Final = "hacpo_peer_row"
"""Batch rows ``[B]``: True on the peer rows."""
SOURCE: Final = "hacpo_source"
"""Batch rows ``[B]``: the pool index of a peer row's source policy; -1 on own rows (the per-source ``used_share``
is counted at the loss, where TRL has shuffled and split the rows)."""
TOKEN_NORMALISED: Final = loss_types_where(normaliser="generation_tokens")
"""TRL 1.16 loss types whose normaliser is ``num_items_in_batch`` (the generation's completion tokens over the ranks;
``LOSS_TYPES``); the others (``bnpo`` is refused) count a micro-batch's rows."""


@dataclass
class LossUse:
    """The peer rows that moved the gradient over one generation's passes, counted at the loss (every parameter
    update, every ``num_iterations``), per source policy (the pool's order)."""

    passes_left: int  # micro-batches of this generation still to come: steps_per_generation x num_iterations
    moved: torch.Tensor  # float64 [M] peer rows whose weighted advantage was nonzero, summed over the passes
    rows: torch.Tensor  # float64 [M] peer rows seen, summed over the passes (each row once per iteration)


class HACPOAdapter(PooledRowsAdapter):
    spec = HACPO
    settings: HACPOSettings

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.capability_history: list[torch.Tensor] = []  # [M] per step, oldest first, the window's steps
        self.coefficients = torch.ones(len(self.pool_order))  # [M] ω(j, k) of this step, by source policy
        self.capability = torch.ones(len(self.pool_order))  # [M] smoothed capabilities of this step (Eq. 9)
        self.ratios = torch.ones(len(self.pool_order), len(self.pool_order))  # [M, M] ω(k, j) of this step (Eq. 8)
        self.generation_update = 0  # the trainer's optimizer steps when this step's batch was built
        self.row_scale = 1.0  # this generation's (own + peer rows) / own rows under a row-counting loss_type
        self.loss_use: LossUse | None = None  # this generation's count of the peer rows that moved, until logged

    # -- Sec. 3.1 / 3.2: advantages and the capability behind them --------------------------------
    def _pooled_advantages(self, rollouts: StepRollouts,
                           peers: dict[str, pa.Table]) -> tuple[PeerGroups, torch.Tensor, range, torch.Tensor]:
        """The pooled groups with HACPO's advantages ``[P, M, K]`` for this learner (Eqs. 6-7)."""
        peer, pool = self.pooled_rewards(rollouts, peers)  # pool: [P, M, K]
        learner_m = self.pool_order.index(self.policy)
        advantages = self.capability_step(pool, learner_m)  # [P, M, K]
        groups = rollouts.local_groups
        return peer, advantages, groups, advantages[list(groups), learner_m].reshape(-1)

    def capability_step(self, pool: torch.Tensor, learner_m: int) -> torch.Tensor:
        """Add this step's capabilities to the window; the learner's advantages of the pool ``[P, M, K]``. Every
        rank and every policy of the pool computes the same capabilities: they read the same rewards."""
        from mutualrl.regimes.hacpo.maths import (
            capability_advantages,
            capability_ratios,
            discrepancy_coefficients,
            smoothed_capability,
            step_capability,
        )

        settings = self.settings
        performance = step_capability(pool, settings.capability)  # [M]
        self.capability_history = [*self.capability_history, performance][-settings.capability_window:]
        capability = smoothed_capability(torch.stack(self.capability_history), settings.capability_window)  # [M]
        ratios = capability_ratios(capability, settings.max_capability_ratio)  # [M, M]
        self.capability, self.ratios = capability, ratios
        ones = torch.ones_like(capability)  # [M]
        baseline_weights = ratios[learner_m] if settings.capability_advantage else ones  # [M]
        self.coefficients = discrepancy_coefficients(ratios, learner_m) if settings.discrepancy_coefficient else ones
        return capability_advantages(pool, baseline_weights, learner_m, settings.std_epsilon)  # [P, M, K]

    # -- the running state a checkpoint keeps -----------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The capability window (Eq. 9's last ``capability_window`` per-step performances ``[M]``, oldest first, by
        the pool's policies; ``None`` for a policy with no scored rollout that step) and its dtype: a resumed run
        smooths over the steps before its checkpoint as the uninterrupted run does. The rest is rebuilt each step
        (the capabilities, ratios and coefficients from the window; the clip band's update count and the peer rows'
        use count from the step's own generation)."""
        history = torch.stack(self.capability_history) if self.capability_history else torch.zeros(0)
        return {"policies": self.pool_order, "dtype": str(history.dtype).removeprefix("torch."),
                "capability_history": [[None if math.isnan(x) else x for x in row.tolist()]
                                       for row in self.capability_history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from mutualrl.regimes.api import UsageError

        saved, order = list(state.get("policies") or []), self.pool_order
        if sorted(saved) != sorted(order):
            raise UsageError(f"regime 'hacpo': the checkpoint's capability window is of the policies {saved}, "
                             f"this pool's are {order}")
        dtype = getattr(torch, str(state.get("dtype")), None)
        if not isinstance(dtype, torch.dtype):
            raise UsageError(f"regime 'hacpo': the checkpoint's capability window has no dtype torch knows "
                             f"({state.get('dtype')!r})")
        columns = [saved.index(name) for name in order]  # a resumed pool may list its policies in another order
        rows = [[math.nan if x is None else float(x) for x in row] for row in state["capability_history"]]
        self.capability_history = [torch.tensor([row[m] for m in columns], dtype=dtype)  # [M] each
                                   for row in rows][-self.settings.capability_window:]

    # -- Sec. 3.3 / 3.4: the peer rows' ratio and weight ---------------------------------------------
    def step_metrics(self, step: PooledStep, weights: torch.Tensor | None) -> dict[str, float]:
        """The pooled rows' metrics with the peer's trace as the ratio's denominator (the learner-snapshot ratio TRL sees
        on a peer row is 1 at generation, which says nothing about how far the peer is)."""
        traced = step if step.snapshot is None else replace(step, behaviour=step.peer_denominator())
        return super().step_metrics(traced, weights)

    def transform(self, output: GRPOBatch, rollouts: StepRollouts,
                  peers: dict[str, pa.Table]) -> tuple[GRPOBatch, dict[str, float]]:
        from mutualrl.regimes.hacpo.maths import sequence_log_ratio

        step = self.pool_step(output, rollouts, peers)
        self.generation_update = self.trainer.state.global_step
        n_local, device = step.n_local, step.peer_mask.device
        log_s = sequence_log_ratio(step.snapshot[n_local:], step.peer_traces, step.peer_mask,
                                   step.source_tokens)  # [N]
        order = self.pool_order
        sources = torch.tensor([order.index(name) for name, _ in step.sources], dtype=torch.long)  # [N]
        coefficients = self.coefficients[sources].to(device, log_s.dtype)  # [N]
        own = torch.ones(n_local, dtype=log_s.dtype, device=device)  # [B]
        batch = step.batch
        batch[PEER_LOGPS] = torch.cat([step.snapshot[:n_local], step.peer_traces])  # [B+N, T]
        batch[COEFFICIENT] = torch.cat([own, coefficients])  # [B+N]
        own_tokens = batch["completion_mask"][:n_local].sum(dim=1).to(log_s.dtype)  # [B]
        batch[SOURCE_TOKENS] = torch.cat([own_tokens, step.source_tokens.to(device, log_s.dtype)])  # [B+N]
        batch[PEER_ROW] = torch.cat([own == 0, torch.ones_like(log_s, dtype=torch.bool)])  # [B+N]
        batch[SOURCE] = torch.cat([torch.full((n_local,), -1, dtype=torch.long), sources]).to(device)  # [B+N]
        args, m = self.trainer.args, len(order)
        self.loss_use = LossUse(args.steps_per_generation * args.num_iterations,
                                torch.zeros(m, dtype=torch.float64), torch.zeros(m, dtype=torch.float64))
        own_rows = torch.ones(n_local, step.width, dtype=torch.long, device=device)  # [B, T]
        batch["tool_mask"] = torch.cat([own_rows, torch.zeros_like(step.peer_mask)])  # [B+N, T]: TRL's loss skips peers
        self.row_scale = self.standalone_normaliser(batch, n_local)
        metrics = self.step_metrics(step, None)
        metrics.update(self.hacpo_metrics(log_s, step.scored))
        return batch, metrics

    def standalone_normaliser(self, batch: GRPOBatch, n_local: int) -> float:
        """Make the loss's normaliser the learner's standalone batch's, so that a row weighs what it weighs there:
        under a token-normalised ``loss_type`` ``num_items_in_batch`` counts the own rows' tokens only (over the
        ranks); under one that counts rows, returns ``(B + N) / B``, the factor by which :meth:`token_weights` and
        :meth:`extra_loss` scale the rows' terms back (TRL divides each micro-batch by its ``(B + N) / spg`` rows, a
        standalone run by its ``B / spg``). The authors' code takes each mini-batch's mean over a standalone-sized
        mini-batch, own rows first, so its own rows' gradient is standalone GSPO's of the same advantages, and a peer
        row weighs as much as an own row; the count alone (the rows' places) would scale the own rows by
        ``B / (B + N)``, ½ on a pool of two."""
        if self.trainer.loss_type in TOKEN_NORMALISED:
            own_tokens = batch["completion_mask"][:n_local].sum()
            batch["num_items_in_batch"] = self.trainer.accelerator.gather(own_tokens).sum()
            return 1.0
        return batch["completion_mask"].size(0) / n_local

    def token_weights(self, inputs: GRPOBatch) -> torch.Tensor | None:
        """TRL's policy term on the own rows scaled by :attr:`row_scale` (the peer rows carry none: ``tool_mask``);
        None outside a pooled training batch or where the normaliser needs no scaling."""
        if inputs.get(PEER_ROW) is None or self.row_scale == 1.0:
            return None
        mask = inputs["completion_mask"]  # [B, T]
        return torch.full(mask.shape, self.row_scale, dtype=torch.float32, device=mask.device)  # [B, T]

    def _reference_logps(self, rows: AppendedRows) -> torch.Tensor:
        """The peer rows' reference log-probs, read only by a KL term on them (``kl_on_peer_rows``): without it TRL's
        KL never sees a peer row (its ``tool_mask``), so they are the snapshot's and no reference pass is run."""
        if self.settings.kl_on_peer_rows:
            return super()._reference_logps(rows)
        return rows.batch["old_per_token_logps"][rows.n_local:]  # [N, T]

    def extra_loss(self, model: torch.nn.Module, inputs: GRPOBatch) -> torch.Tensor | None:
        """Eq. 50 on this micro-batch's peer rows, as a loss aggregated like TRL's own (``aggregate_loss``), from the
        log-probs of TRL's forward of this micro-batch: ``s`` is the current sequence ratio, and the band's lower bound
        that of this parameter update of the step; the KL term on them only under ``kl_on_peer_rows``. Also counts
        the peer rows whose weighted advantage is nonzero here (:meth:`count_use`)."""
        from mutualrl.regimes.api import UsageError
        from mutualrl.regimes.hacpo.maths import cross_agent_objective, moving_rows, sequence_log_ratio

        peer_row = inputs.get(PEER_ROW)
        if peer_row is None:
            return None
        trainer, scale = self.trainer, self.row_scale
        own_kl = scale != 1.0 and trainer.beta != 0.0  # TRL's KL on own rows, brought to the standalone normaliser
        if not bool(peer_row.any()):
            self.count_use(model, inputs, torch.zeros_like(peer_row))  # a pass without peer rows is a pass too
            if not own_kl:
                return None
        logps = trainer.policy_logps  # [B, T] with grad
        if logps is None:
            raise UsageError("regime 'hacpo' needs the log-probs of TRL's own loss forward, which TRL's Liger loss "
                             "does not expose: set grpo.use_liger_kernel=false")
        mask = inputs["completion_mask"]  # [B, T]
        own_term = self.own_kl_rescale(logps, inputs, scale - 1.0) if own_kl else torch.zeros_like(logps)  # [B, T]
        if not bool(peer_row.any()):
            return trainer.aggregate_loss(own_term, mask, inputs)
        log_s = sequence_log_ratio(logps, inputs[PEER_LOGPS].to(logps.dtype), mask, inputs[SOURCE_TOKENS])  # [B]
        lower, upper = self.clip_band(trainer.state.global_step - self.generation_update)
        truncation = self.truncation_bound()
        advantages, coefficients = inputs["advantages"].to(logps.dtype), inputs[COEFFICIENT].to(logps.dtype)  # [B] each
        objective = cross_agent_objective(log_s, advantages, coefficients, self.settings.alpha, lower, upper,
                                          truncation)  # [B]
        moved = moving_rows(log_s, advantages, coefficients, self.settings.alpha, lower, upper, truncation)  # bool [B]
        self.count_use(model, inputs, moved & peer_row & mask.bool().any(dim=1))
        per_token = torch.where(peer_row[:, None], -objective[:, None], torch.zeros_like(logps))  # [B, T]
        if self.settings.kl_on_peer_rows and trainer.beta != 0.0:
            ref = inputs["ref_per_token_logps"]  # [B, T]
            kl = torch.exp(ref - logps) - (ref - logps) - 1  # [B, T] TRL's k3
            per_token = per_token + trainer.beta * torch.where(peer_row[:, None], kl, torch.zeros_like(kl))  # [B, T]
        return trainer.aggregate_loss(scale * per_token + own_term, mask, inputs)

    def own_kl_rescale(self, logps: torch.Tensor, inputs: GRPOBatch, extra: float) -> torch.Tensor:
        """``extra`` times TRL's KL term on the own rows ``[B, T]`` (0 on peer rows), as TRL computes it (k3 to the
        reference, times GSPO's sequence ratio under ``use_bias_correction_kl``), so that TRL's term plus this one,
        reduced alike, is the KL term of the standalone normaliser (:meth:`standalone_normaliser`)."""
        trainer = self.trainer
        own = ~inputs[PEER_ROW]  # bool [B]
        ref = inputs["ref_per_token_logps"]  # [B, T]
        kl = torch.exp(ref - logps) - (ref - logps) - 1  # [B, T] TRL's k3
        if trainer.args.use_bias_correction_kl:
            old = inputs.get("old_per_token_logps")
            old = logps.detach() if old is None else old  # [B, T]
            mask = (inputs["completion_mask"] * inputs["tool_mask"]).to(logps.dtype)  # [B, T] TRL's own
            log_ratio = ((logps - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B] GSPO's sequence ratio
            kl = kl * torch.exp(log_ratio)[:, None]  # [B, T]
        return torch.where(own[:, None], extra * trainer.beta * kl, torch.zeros_like(kl))  # [B, T]

    def count_use(self, model: torch.nn.Module, inputs: GRPOBatch, moved: torch.Tensor) -> None:
        """Add this micro-batch's peer rows, and those of them that moved the gradient (``moved``, bool ``[B]``), to
        the generation's count per source; after its last pass (``steps_per_generation x num_iterations`` training
        micro-batches) log ``from/<peer>/used_share``, the rows that moved over the rows seen, over every update. Every
        rank reaches the last pass together (the same number of micro-batches), so the collective stays in step.
        Evaluation's forwards are not passes of the generation and are not counted."""
        use = self.loss_use
        if use is None or not model.training:
            return
        sources = inputs[SOURCE]  # long [B] the pool index of a peer row's source, -1 on own rows
        peer = sources >= 0  # bool [B]
        m = use.rows.numel()
        use.rows += torch.bincount(sources[peer].cpu(), minlength=m).double()  # [M]
        use.moved += torch.bincount(sources[peer & moved].cpu(), minlength=m).double()  # [M]
        use.passes_left -= 1
        if use.passes_left > 0:
            return
        self.loss_use = None
        order = self.pool_order
        self.trainer.record_metrics({f"{self.name}/from/{name}/used_share": Share(use.moved[order.index(name)].item(),
                                                                               use.rows[order.index(name)].item())
                                     for name in self.peers})

    def truncation_bound(self) -> float:
        """The cap ``C`` of ``s`` that the correction settings give (``inf``: none)."""
        from mutualrl.regimes.hacpo.maths import correction_bounds

        return correction_bounds(self.settings.correction, self.settings.truncation_bound)

    def source_metrics(self, step: PooledStep) -> dict[str, float]:
        """Per peer, PRP's figures of HACPO's own importance weight, the sequence ratio ``s`` of each peer row (one
        unit per row), at the step's first update: ``ess`` of the weights Eq. 50 gives the rows (``ω·s^(α+1)`` inside
        the band, 0 outside or unscored; :func:`~mutualrl.regimes.hacpo.maths.cross_agent_weight`), ``ess_raw`` of the
        ``s``, ``log_ratio_mean`` / ``log_ratio_max`` of ``log s`` (a per-token mean of each row), ``truncated_share``
        (rows whose ``s`` was capped at ``C``) and ``filtered_share`` (rows that keep no weight: outside the clip band,
        or unscored). ``used_share`` is not one of them: it is counted at the loss, over every update
        (:meth:`count_use`), since the band rises with each update and ``s`` moves. The ESS sums are reduced over the
        ranks (one collective)."""
        from mutualrl.regimes.hacpo.maths import cross_agent_weight, cross_row_outcome, sequence_log_ratio

        log_s = sequence_log_ratio(step.snapshot[step.n_local:], step.peer_traces, step.peer_mask,
                                   step.source_tokens).double()  # [N]
        band = self.clip_band(0)
        kept, truncated = cross_row_outcome(log_s, *band, self.truncation_bound())  # bool [N] each
        kept, truncated = kept & step.scored, truncated & step.scored  # bool [N] each
        sources = torch.tensor([self.pool_order.index(name) for name, _ in step.sources], dtype=torch.long)  # [N]
        coefficients = self.coefficients[sources].to(log_s.device, log_s.dtype)  # [N]
        weights = cross_agent_weight(log_s, coefficients, self.settings.alpha, *band, self.truncation_bound())  # [N]
        weights = weights * kept  # [N]
        names = [name for name, _ in step.sources]
        out: dict[str, float] = {}
        ess_parts = []
        for peer in self.peers:
            mine = torch.tensor([name == peer for name in names], dtype=torch.bool, device=log_s.device)  # [N]
            rows, s, w = int(mine.sum()), torch.exp(log_s[mine]), weights[mine]  # [n] each
            ess_parts.append([w.sum().item(), (w * w).sum().item(), s.sum().item(), (s * s).sum().item(), rows])
            out[f"from/{peer}/log_ratio_mean"] = Share(log_s[mine].sum().item(), rows)
            out[f"from/{peer}/log_ratio_max"] = Quantile(log_s[mine].cpu(), 1.0)
            out[f"from/{peer}/truncated_share"] = Share(truncated[mine].sum().item(), rows)
            out[f"from/{peer}/filtered_share"] = Share(rows - kept[mine].sum().item(), rows)
        return self._with_source_ess(out, ess_parts)

    def clip_band(self, update_index: int) -> tuple[float, float]:
        """The peer rows' band ``[lower, upper]`` of ``s`` at this parameter update of the step (Eqs. 13-14)."""
        from mutualrl.regimes.hacpo.maths import stepwise_lower_bound

        settings = self.settings
        if not settings.cross_clip:
            return 0.0, math.inf
        return stepwise_lower_bound(settings.clip_delta, settings.clip_step, update_index), 1.0

    def hacpo_metrics(self, log_s: torch.Tensor, scored: torch.Tensor) -> dict[str, float]:
        """The learner's capability, the peers' mean capability over the learner's (Eq. 10's ω whether or not it is
        applied), the peer rows' mean sequence ratio ``s`` and their share kept at the step's first update (scored and
        inside the clip band)."""
        learner_m = self.pool_order.index(self.policy)
        peers = [m for m in range(len(self.pool_order)) if m != learner_m]
        from mutualrl.regimes.hacpo.maths import cross_row_outcome

        s = torch.exp(log_s.double())  # [N]
        inside, _ = cross_row_outcome(log_s, *self.clip_band(0), self.truncation_bound())  # bool [N]
        inside = inside & scored  # bool [N]
        n = s.numel()
        return {
            "capability": float(self.capability[learner_m]),
            "capability_ratio": float(self.ratios[peers, learner_m].mean()),
            "cross_ratio": Share(float(s.sum()), n),
            "cross_kept": Share(float(inside.sum()), n),
        }

"""Peer rows in the learner's batch: the step every regime that pools its peers' rollouts builds (PRP, HACPO).

The learner's candidate group for a prompt is its own K rollouts plus every peer's K (the paper's "unified candidate
pool", Sec. "Regime 1"). :meth:`PooledRowsAdapter.pool_step` composes the seam's batch surgery
(:mod:`mutualrl.regimes.core.batch_rows`) into that step: the peer rows retokenized into the learner's vocabulary (THL),
appended after the learner's own rows with the learner's prompt tokens, the learner's snapshot of every row, the
peers' behaviour traces aligned onto the learner's tokens, the ratio's denominator and TRL's extras. What a regime
decides is a hook: the advantages of the pool (:meth:`PooledRowsAdapter._pooled_advantages`), the ratio's denominator
(:meth:`PooledRowsAdapter.behaviour_logps`), the peer rows' reference log-probs and its per-source figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mutualrl.errors import UsageError
from mutualrl.regimes.core.adapter import RegimeAdapter
from mutualrl.regimes.core.batch_rows import (
    AppendedRows,
    append_rows,
    count_items,
    extend_trl_extras,
    learner_snapshot,
    reference_logps,
    refuse_unsupported,
)
from mutualrl.regimes.core.peer_responses import LearnerResponses, learner_responses, peer_row_views
from mutualrl.regimes.core.peers import PeerGroups, gather_peer_groups
from mutualrl.regimes.core.pooled_spec import PooledRowsSettings
from mutualrl.regimes.core.rank_metrics import Total
from mutualrl.regimes.core.trainer_interface import GRPOBatch, StepRollouts
from mutualrl.regimes.core.word_units import comparison_groups, singleton_groups

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class PooledStep:
    """What a pooling regime computed for one step: the steps after it, a subclass's hooks and the metrics read it,
    so nothing is computed twice. Peer rows follow the learner's ``n_local`` rows in ``batch``, one per ``sources``
    entry."""

    batch: GRPOBatch  # TRL's batch with the peer rows after the learner's own, padded to ``width``
    n_local: int
    width: int
    sources: list[tuple[str, int]]  # (peer, row of its table) of each peer row
    responses: LearnerResponses  # the peer rows' text, finished flag, learner token ids and spans
    peer_mask: torch.Tensor  # int [N, T] completion mask of the peer rows (all 0 on an unscored row)
    scored: torch.Tensor  # bool [N] the peer rows whose reward was scored (an unscored row keeps its place, weight 0)
    snapshot: torch.Tensor | None  # float [B+N, T] learner's log-probs at generation; None where TRL needs none
    peer_traces: torch.Tensor | None  # float [N, T] the peers' THL-aligned behaviour log-probs; None if not read
    behaviour: torch.Tensor | None  # float [B+N, T] the ratio's denominator (TRL's old_per_token_logps)
    kept: torch.Tensor | None = None  # bool [N] the peer rows the loss keeps, once the regime has decided (PRP's)
    peer_groups: torch.Tensor | None = None  # int64 [N, T] each token's comparison unit (word_units); None: own token
    source_tokens: torch.Tensor | None = None  # float [N] the peer's own tokens whose log-probs reached the row

    @property
    def n_peer(self) -> int:
        return len(self.sources)

    def peer_log_weights(self) -> torch.Tensor:
        """``log w = snapshot - peer trace`` of the peer rows ``[N, T]`` (0 outside their mask): the learner's
        importance weight of the peer's sample, whichever denominator the ratio uses."""
        mask = self.peer_mask.bool()  # [N, T]
        diff = self.snapshot[self.n_local:] - self.peer_traces  # [N, T]
        return torch.where(mask, diff, torch.zeros_like(diff))  # [N, T]

    def peer_denominator(self) -> torch.Tensor:
        """The learner's snapshot on its own rows and the peers' aligned traces on theirs ``[B+N, T]``: the ratio
        whose denominator is the policy that sampled each row."""
        behaviour = self.snapshot.clone()  # [B+N, T]
        behaviour[self.n_local:] = self.peer_traces
        return behaviour


@dataclass
class PeerTraces:
    """The peers' traces on the learner's tokens, one entry per peer row: ``traces`` float32 ``[n_i]``, ``groups``
    int64 ``[m_i]`` (each learner token's comparison unit, :func:`~mutualrl.regimes.core.word_units.comparison_groups`)
    and ``source_tokens`` (the peer's own tokens whose log-probs reached the row: its EOS where on the learner's EOS;
    a token whose unit found no learner token, past a truncated row's end, not)."""

    traces: list[np.ndarray]
    groups: list[np.ndarray]
    source_tokens: list[int]


def require_whole_micro_batches(rows: int, steps_per_generation: int, regime: str) -> None:
    """TRL splits a generation's rows into ``steps_per_generation`` micro-batches and silently drops the remainder
    (``split_tensor_dict``): a pooled batch must divide exactly, so that no row is lost."""
    if rows % steps_per_generation != 0:
        raise RuntimeError(f"regime {regime!r}: the pooled batch has {rows} rows, not a multiple of "
                           f"steps_per_generation={steps_per_generation}; TRL's split would drop "
                           f"{rows % steps_per_generation} of them")


class PooledRowsAdapter(RegimeAdapter):
    """The base of a regime whose learner trains on its peers' rollouts as rows of its own batch."""

    settings: PooledRowsSettings  # typed view of RegimeAdapter.settings (a regime's subclass)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.denominator = self.settings.denominator
        self.reads_traces = self.needs_traces()
        self.publishes_traces = self.publishes_spans = self.reads_traces  # THL aligns the peers' traces by span
        columns = ["prompt_id", "sample_index", "reward", "response_text", "finished"]
        if self.reads_traces:
            columns += ["response_token_spans", "behaviour_logps"]
        self.peer_columns = tuple(columns)

    def needs_traces(self) -> bool:
        """Whether the peers' behaviour traces are read (and this policy's published): the peer denominator and
        the importance-weight corrections use them; a variant whose weights need them says so here."""
        return self.denominator == "peer" or self.settings.correction != "none"

    # -- the step, composed of the seam's batch surgery -----------------------------------------------
    def pool_step(self, output: GRPOBatch, rollouts: StepRollouts, peers: dict[str, pa.Table]) -> PooledStep:
        """The pooled batch: pooled advantages, the peer rows in the learner's tokens, the learner's snapshot,
        the peers' aligned traces and the ratio's denominator (paper, Sec. "Regime 1")."""
        refuse_unsupported(output, self.name)
        rollouts.require_whole_groups(self.name)
        trainer = self.trainer
        peer, advantages, groups, own_adv = self._pooled_advantages(rollouts, peers)
        n_local = len(rollouts.prompt_ids_local)
        device = output["completion_ids"].device
        output["advantages"] = own_adv.to(device, output["advantages"].dtype)

        scored = ~torch.isnan(peer.values["reward"])  # bool [P, M-1, K]
        sources, prompt_rows, peer_adv, row_scored = self._peer_rows(peer.names, peer.rows, advantages, groups,
                                                                     rollouts.num_generations, scored)
        responses = learner_responses(peers, sources, trainer.processing_class, trainer.max_completion_length)
        counted = torch.tensor(row_scored, dtype=torch.bool, device=device)  # [N]
        rows = append_rows(output, responses.ids, prompt_rows, peer_adv, counted, trainer.processing_class.pad_token_id)
        require_whole_micro_batches(n_local + len(sources), trainer.args.steps_per_generation, self.name)
        step = PooledStep(batch=rows.batch, n_local=n_local, width=rows.width, sources=sources, responses=responses,
                          peer_mask=rows.mask, scored=counted,
                          snapshot=learner_snapshot(trainer, output, rows, self.reads_traces),
                          peer_traces=None, behaviour=None)
        if self.reads_traces:
            step.peer_traces, step.peer_groups, step.source_tokens = self._peer_traces(peers, step)
        step.behaviour = self.behaviour_logps(step)
        rows.batch["old_per_token_logps"] = step.behaviour
        extend_trl_extras(output, rows, step.behaviour, lambda: self._reference_logps(rows))
        count_items(trainer, rows.batch)
        return step

    def pooled_rewards(self, rollouts: StepRollouts, peers: dict[str, pa.Table]) -> tuple[PeerGroups, torch.Tensor]:
        """The peers' rollouts of every rank's groups and the pool's rewards ``[P, M, K]`` (so "batch" scaling sees
        the whole pooled batch)."""
        k = rollouts.num_generations
        groups = rollouts.group_prompt_ids
        peer = gather_peer_groups(peers, [n for n in self.pool_order if n != self.policy], groups, k, rollouts.step)
        return peer, peer.pool(rollouts.rewards_global.view(len(groups), k), self.pool_order.index(self.policy))

    # -- the hooks a pooling regime implements ------------------------------------------------------------
    def _pooled_advantages(self, rollouts: StepRollouts,
                           peers: dict[str, pa.Table]) -> tuple[PeerGroups, torch.Tensor, range, torch.Tensor]:
        """The peer groups, the advantages ``[P, M, K]`` of the pool, this rank's groups and its own rows'
        advantages ``[B]``."""
        raise NotImplementedError

    def behaviour_logps(self, step: PooledStep) -> torch.Tensor | None:
        """The ratio's denominator of every row ``[B+N, T]`` (TRL's ``old_per_token_logps``): by default the
        learner's snapshot (None where TRL needs none)."""
        return None if step.snapshot is None else step.snapshot.clone()  # [B+N, T]

    def _reference_logps(self, rows: AppendedRows) -> torch.Tensor:
        """Reference-model log-probs of the peer rows ``[N, T]`` (for the KL term when beta > 0)."""
        return reference_logps(self.trainer, rows)

    # -- the peer rows --------------------------------------------------------------------------------------
    def _peer_rows(self, names, rows, advantages, groups, k, scored) -> tuple[list, list, list, list]:
        """Peer rows of this process's groups, (local group, peer, sample) in a fixed order: their (peer, row)
        sources, learner prompt rows, advantages (``advantages``: ``[P, M, K]``) and whether each was scored
        (``scored``: bool ``[P, M-1, K]``). A peer rollout not scored (its reward NaN, TRL's None) keeps its place
        with advantage 0 (and no token in the loss, :func:`~mutualrl.regimes.core.batch_rows.append_rows`): every rank
        then holds ``M·B`` rows, runs the same forwards and splits them into whole micro-batches."""
        order = self.pool_order
        source_rows, prompt_rows, peer_adv, row_scored = [], [], [], []
        for local_p, p in enumerate(groups):
            for slot, name in enumerate(names):
                m = order.index(name)
                for j, row in enumerate(rows[p, slot].tolist()):  # rows: int64 [P, M-1, K]
                    is_scored = bool(scored[p, slot, j])
                    source_rows.append((name, row))
                    prompt_rows.append(local_p * k)
                    peer_adv.append(float(advantages[p, m, j]) if is_scored else 0.0)
                    row_scored.append(is_scored)
        return source_rows, prompt_rows, peer_adv, row_scored

    def _peer_traces(self, peers: dict[str, pa.Table],
                     step: PooledStep) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The peers' behaviour traces on the learner's tokens ``[N, T]`` (THL); past a row's end (padding, outside
        the mask) the learner's snapshot, so that the ratio there is 1. With them each token's comparison unit
        ``[N, T]`` (:mod:`~mutualrl.regimes.core.word_units`) and the peer's own tokens that reached each row
        ``[N]``."""
        responses = step.responses
        aligned = self._aligned_traces(peers, step.sources, responses.texts, responses.finished, responses.spans,
                                       responses.ids)
        traces = step.snapshot[step.n_local:].clone()  # [N, T]
        groups = singleton_groups(tuple(traces.shape))  # [N, T]
        for i, (values, row_groups) in enumerate(zip(aligned.traces, aligned.groups, strict=True)):
            traces[i, : len(values)] = torch.as_tensor(values, dtype=traces.dtype, device=traces.device)
            width = min(len(row_groups), traces.shape[1])
            groups[i, :width] = torch.from_numpy(row_groups[:width])
        source_tokens = torch.tensor(aligned.source_tokens, dtype=torch.float64)  # [N]
        return traces, groups.to(traces.device), source_tokens.to(traces.device)

    def _aligned_traces(self, peers, source_rows, texts, finished, target_spans, peer_ids) -> PeerTraces:
        """Peer behaviour traces on the learner's token grid (THL), EOS mapped onto EOS; each learner token's
        comparison unit; the count of the peer's own tokens whose log-probs reached the row."""
        from mutualrl.thl import align_logprobs

        span_rows = peer_row_views(peers, source_rows, "response_token_spans")  # int32 [2n] views each
        logp_rows = peer_row_views(peers, source_rows, "behaviour_logps")  # float32 [n] views each
        src_spans, src_logps, src_special, eos_logps = [], [], [], []
        for (name, _), span_row, logp_row in zip(source_rows, span_rows, logp_rows, strict=True):
            if span_row is None:
                raise UsageError(f"peer {name!r} did not publish response token spans, which PRP needs to align "
                                 "its behaviour log-probs (all policies must run the same regime settings)")
            spans = span_row.astype(np.int64).reshape(-1, 2)  # [n, 2] the peer's own token spans
            if logp_row is None:
                raise UsageError(f"peer {name!r} did not publish behaviour log-probs, which PRP with "
                                 "denominator 'peer' needs (all policies must run the same regime settings)")
            logps = logp_row.astype(np.float64)  # [n]
            special = spans[:, 0] < 0
            src_spans.append(spans)
            src_logps.append(logps)
            src_special.append(special)
            eos_logps.append(float(logps[-1]) if special.size and special[-1] else None)
        result = align_logprobs(texts, src_spans, src_logps, target_spans, src_special=src_special)
        out = PeerTraces([], [], [])
        for i, (values, ids, done, spans, eos_lp) in enumerate(zip(result.values, peer_ids, finished, target_spans,
                                                                   eos_logps, strict=True)):
            trace = np.zeros(len(ids), dtype=np.float32)
            n = min(len(values), len(ids))
            trace[:n] = np.nan_to_num(np.asarray(values[:n], dtype=np.float32), nan=0.0)
            on_eos = done and eos_lp is not None and len(ids) > len(spans)  # the appended learner EOS
            if on_eos:
                trace[len(spans)] = eos_lp
            out.traces.append(trace)
            out.groups.append(comparison_groups(result.target_comparison_units[i], result.target_copied[i]))
            out.source_tokens.append(int(len(src_spans[i]) - result.residual_tokens[i] + on_eos))
        return out

    # -- the metrics ----------------------------------------------------------------------------------------
    def step_metrics(self, step: PooledStep, weights: torch.Tensor | None) -> dict[str, float]:
        """The ratio diagnostics of App. "Importance-ratio distribution" of the peer rows (the ratio at generation:
        snapshot over ``step.behaviour``), the number of peer rows and the regime's per-source figures."""
        from mutualrl.regimes.core.importance import ratio_statistics

        if step.snapshot is None:  # the ratio is exp(logp - logp.detach()) = 1 on every row
            ratios = torch.ones(step.peer_mask.shape, dtype=torch.float32, device=step.peer_mask.device)  # [N, T]
        else:
            log_ratio = (step.snapshot[step.n_local:] - step.behaviour[step.n_local:]) * step.peer_mask.float()
            ratios = torch.exp(log_ratio)  # [N, T]
        stats = ratio_statistics(ratios, step.peer_mask, epsilon=self.trainer.epsilon_low,
                                 epsilon_high=self.trainer.epsilon_high)
        stats["peer_rows"] = Total(step.n_peer)
        stats.update(self.source_metrics(step))
        return stats

    def source_metrics(self, step: PooledStep) -> dict[str, float]:
        """Per peer, ``from/<peer>/<figure>``: the regime's own (none here)."""
        return {}

    def _with_source_ess(self, out: dict[str, Any], ess_parts: list[list[float]]) -> dict[str, Any]:
        """``out`` with ``from/<peer>/ess`` (of the loss's weights) and ``from/<peer>/ess_raw`` of each peer, from this
        rank's ``[Σ lw, Σ lw², Σ w, Σ w², units]`` per peer (``ess_parts``, in the order of ``self.peers``) summed over
        the ranks: one collective, every rank."""
        from mutualrl.regimes.core.importance import normalised_ess

        accelerator = self.trainer.accelerator
        totals = accelerator.reduce(torch.tensor(ess_parts, dtype=torch.float64, device=accelerator.device),
                                    reduction="sum")  # [P, 5]
        for peer, (lw_sum, lw_sq_sum, w_sum, w_sq_sum, units) in zip(self.peers, totals.tolist(), strict=True):
            out[f"from/{peer}/ess"] = normalised_ess(lw_sum, lw_sq_sum, units)
            out[f"from/{peer}/ess_raw"] = normalised_ess(w_sum, w_sq_sum, units)
        return out

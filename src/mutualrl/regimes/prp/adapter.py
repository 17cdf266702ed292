"""Data-level adapter: Peer Rollout Pooling (paper Sec. "Regime 1").

The learner's candidate group for a prompt is its own K rollouts plus every peer's K
(the "unified candidate pool"), with GRPO advantages normalised over the pool. Peer rows
enter TRL's batch retokenized into the learner's vocabulary (THL), after the learner's own
rows, with the learner's prompt tokens. Their behaviour log-probs (TRL's
``old_per_token_logps``, the importance-ratio denominator) are either the learner's own
snapshot (``denominator: learner``, naive pooling) or the peer's recorded trace aligned
onto the learner's tokens by THL (``denominator: peer``); TRL's PPO clip (epsilon) then
applies to every row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mutualrl.errors import UsageError
from mutualrl.padding import pad_to_width, pad_token_rows
from mutualrl.regimes.adapter import RegimeAdapter
from mutualrl.regimes.peers import (
    LearnerResponses,
    PeerGroups,
    gather_peer_groups,
    learner_responses,
    peer_row_views,
    require_whole_groups,
    require_whole_micro_batches,
)
from mutualrl.regimes.prp.spec import PRP, PRPSettings
from mutualrl.regimes.rank_metrics import Quantile, Share, Total
from mutualrl.regimes.seam import TOKEN_WEIGHTS, GRPOBatch, StepRollouts

if TYPE_CHECKING:
    import pyarrow as pa

UNSUPPORTED_KEYS = ("tool_mask", "pixel_values", "image_grid_thw", "token_type_ids", "mm_token_type_ids")


@dataclass
class PRPStep:
    """What PRP computed for one step: the steps after it, a subclass's hooks and the metrics read it, so nothing
    is computed twice. Peer rows follow the learner's ``n_local`` rows in ``batch``, one per ``sources`` entry."""

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

    @property
    def n_peer(self) -> int:
        return len(self.sources)

    def peer_log_weights(self) -> torch.Tensor:
        """``log w = snapshot - peer trace`` of the peer rows ``[N, T]`` (0 outside their mask): the learner's
        importance weight of the peer's sample, whichever denominator the ratio uses."""
        mask = self.peer_mask.bool()  # [N, T]
        diff = self.snapshot[self.n_local:] - self.peer_traces  # [N, T]
        return torch.where(mask, diff, torch.zeros_like(diff))  # [N, T]


class PRPAdapter(RegimeAdapter):
    spec = PRP
    settings: PRPSettings  # typed view of RegimeAdapter.settings (a variant's subclass of PRPSettings)

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

    def transform(self, output: GRPOBatch, rollouts: StepRollouts,
                  peers: dict[str, pa.Table]) -> tuple[GRPOBatch, dict[str, float]]:
        step = self.pool_step(output, rollouts, peers)
        weights = self.peer_token_weights(step)
        if weights is not None:
            own = torch.ones((step.n_local, step.width), dtype=weights.dtype, device=weights.device)  # [B, T]
            step.batch[TOKEN_WEIGHTS] = torch.cat([own, weights])  # [B+N, T]
        return step.batch, self.step_metrics(step, weights)

    # -- the steps and hooks of transform ----------------------------------------------------
    def pool_step(self, output: GRPOBatch, rollouts: StepRollouts, peers: dict[str, pa.Table]) -> PRPStep:
        """The pooled batch: pooled advantages, the peer rows in the learner's tokens, the learner's snapshot,
        the peers' aligned traces and the ratio's denominator (paper, Sec. "Regime 1")."""
        for key in UNSUPPORTED_KEYS:
            if output.get(key) is not None:
                raise UsageError(f"regime {self.name!r} does not support batches with {key!r} (multimodal/tool rollouts)")
        require_whole_groups(rollouts, self.name)
        trainer = self.trainer
        peer, advantages, local_groups, own_adv = self._pooled_advantages(rollouts, peers)
        n_local = len(rollouts.prompt_ids_local)
        device = output["completion_ids"].device
        output["advantages"] = own_adv.to(device, output["advantages"].dtype)

        scored = ~torch.isnan(peer.values["reward"])  # bool [P, M-1, K]
        source_rows, prompt_rows, peer_adv, row_scored = self._peer_rows(peer.names, peer.rows, advantages,
                                                                         local_groups, rollouts.num_generations, scored)
        responses = learner_responses(peers, source_rows, trainer.processing_class, trainer.max_completion_length)
        row_scored = torch.tensor(row_scored, dtype=torch.bool, device=device)  # [N]
        merged, width, peer_mask = self._merged_batch(output, responses.ids, prompt_rows, peer_adv, row_scored)
        require_whole_micro_batches(n_local + len(source_rows), trainer.args.steps_per_generation, self.name)
        step = PRPStep(batch=merged, n_local=n_local, width=width, sources=source_rows, responses=responses,
                       peer_mask=peer_mask, scored=row_scored, snapshot=self._snapshot(output, merged, n_local, width),
                       peer_traces=None, behaviour=None)
        if self.reads_traces:
            step.peer_traces = self._peer_traces(peers, step)
        step.behaviour = self.behaviour_logps(step)
        merged["old_per_token_logps"] = step.behaviour
        self._extend_trl_extras(output, merged, step.behaviour, n_local, step.n_peer, width)
        merged["num_items_in_batch"] = trainer.accelerator.gather(merged["completion_mask"].sum()).sum()
        return step

    def behaviour_logps(self, step: PRPStep) -> torch.Tensor | None:
        """The ratio's denominator of every row ``[B+N, T]``: the learner's snapshot, with the peers' aligned traces
        on the peer rows under ``denominator: peer`` without a correction (the paper's corrected PRP: TRL's PPO clip
        acts on ``w`` itself). Under a correction the peer rows keep the snapshot too (ratio 1 at generation, inside
        every clip band), and ``w`` enters through the correction's weight ``T(w)`` alone."""
        if step.snapshot is None:
            return None
        behaviour = step.snapshot.clone()  # [B+N, T]
        if self.denominator == "peer" and self.settings.correction == "none":
            behaviour[step.n_local:] = step.peer_traces
        return behaviour

    def peer_token_weights(self, step: PRPStep) -> torch.Tensor | None:
        """Per-token loss weights of the peer rows ``[N, T]`` (the learner's rows get 1), or None: the hook a
        variant overrides. PRP's: ``T(w)`` of its correction (:func:`~mutualrl.regimes.prp.maths.correction_weights`;
        ``correction: none``, the paper's PRP: None), 0 on the rows F-TIS's filter drops."""
        from mutualrl.regimes.prp.maths import correction_weights

        settings = self.settings
        if settings.correction == "none":
            return None
        weights = correction_weights(step.peer_log_weights(), step.peer_mask, settings.correction,
                                     settings.correction_level, settings.truncation_bound, settings.drop_bound)
        kept = self.rows_kept(step)[:, None]  # bool [N, 1]
        return torch.where(kept, weights, torch.zeros_like(weights))  # [N, T]

    def rows_kept(self, step: PRPStep) -> torch.Tensor:
        """The peer rows the loss keeps, bool ``[N]``: scored, and under ``ftis`` not dropped by F-TIS's filter
        (advantage <= 0 and sequence KL to the learner >= ``kl_bound``; :func:`~mutualrl.regimes.prp.maths.ftis_kept`)."""
        from mutualrl.regimes.prp.maths import ftis_kept, sequence_kl

        kept = step.scored.clone()  # bool [N]
        if self.settings.correction == "ftis" and step.peer_traces is not None:
            kl = sequence_kl(step.snapshot[step.n_local:], step.peer_traces, step.peer_mask)  # [N] float64
            advantages = step.batch["advantages"][step.n_local:]  # [N]
            kept &= ftis_kept(advantages, kl.to(advantages.device), self.settings.kl_bound)
        return kept

    def step_metrics(self, step: PRPStep, weights: torch.Tensor | None) -> dict[str, float]:
        """PRP's metrics of the step: the ratio diagnostics of App. "Importance-ratio distribution" and the
        number of peer rows."""
        from mutualrl.regimes.prp.maths import ratio_statistics

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

    def source_metrics(self, step: PRPStep) -> dict[str, float]:
        """Per peer (the source of the rows): how off-policy its samples are for this learner and what the loss made of
        them, as ``from/<peer>/<figure>``: ``ess`` (normalised effective sample size of the weights the loss uses, at
        the correction's level: ``T(w)``, 0 on a dropped row; ``w`` itself without a correction), ``ess_raw`` (the same
        of the raw weights ``w``), ``log_ratio_mean`` / ``log_ratio_max`` (raw token ``log w``), ``truncated_share`` /
        ``filtered_share`` (of the correction's units: capped, or keeping no weight), ``used_share`` (of the peer's
        samples of this step's prompts, the rows that train). Only where the peers' traces are read (``w`` needs them).
        The ESS is not a ratio of sums, so its sums are reduced over the ranks here (one collective, every rank)."""
        from mutualrl.regimes.prp.maths import source_diagnostics

        if step.peer_traces is None:
            return {}
        settings = self.settings
        rows = source_diagnostics(step.peer_log_weights(), step.peer_mask, settings.correction,
                                  settings.correction_level, settings.truncation_bound, settings.drop_bound,
                                  self.rows_kept(step))
        names = [name for name, _ in step.sources]
        out: dict[str, float] = {}
        ess_parts = []
        for peer in self.peers:
            index = torch.tensor([i for i, name in enumerate(names) if name == peer], dtype=torch.long)  # [n]
            mine = {key: values[index.to(values.device)].cpu() for key, values in rows.items()}  # each [n]
            units = mine["units"].sum().item()
            ess_parts.append([mine[key].sum().item() for key in ("lw_sum", "lw_sq_sum", "w_sum", "w_sq_sum")] + [units])
            out[f"from/{peer}/log_ratio_mean"] = Share(mine["log_w_sum"].sum().item(), mine["tokens"].sum().item())
            out[f"from/{peer}/log_ratio_max"] = Quantile(mine["log_w_max"][mine["tokens"] > 0], 1.0)
            out[f"from/{peer}/truncated_share"] = Share(mine["truncated"].sum().item(), units)
            out[f"from/{peer}/filtered_share"] = Share(mine["filtered"].sum().item(), units)
            out[f"from/{peer}/used_share"] = Share(mine["used"].sum().item(), step.n_local)
        return self._with_source_ess(out, ess_parts)

    def _with_source_ess(self, out: dict[str, Any], ess_parts: list[list[float]]) -> dict[str, Any]:
        """``out`` with ``from/<peer>/ess`` (of the loss's weights) and ``from/<peer>/ess_raw`` of each peer, from this
        rank's ``[Σ lw, Σ lw², Σ w, Σ w², units]`` per peer (``ess_parts``, in the order of ``self.peers``) summed over
        the ranks: one collective, every rank."""
        from mutualrl.regimes.prp.maths import normalised_ess

        accelerator = self.trainer.accelerator
        totals = accelerator.reduce(torch.tensor(ess_parts, dtype=torch.float64, device=accelerator.device),
                                    reduction="sum")  # [P, 5]
        for peer, (lw_sum, lw_sq_sum, w_sum, w_sq_sum, units) in zip(self.peers, totals.tolist(), strict=True):
            out[f"from/{peer}/ess"] = normalised_ess(lw_sum, lw_sq_sum, units)
            out[f"from/{peer}/ess_raw"] = normalised_ess(w_sum, w_sq_sum, units)
        return out

    def _pooled_advantages(self, rollouts: StepRollouts,
                           peers: dict[str, pa.Table]) -> tuple[PeerGroups, torch.Tensor, range, torch.Tensor]:
        """GRPO advantages over the unified candidate pool of every group: the peer groups,
        the advantages ``[groups, policies, K]``, this process's groups and its own rows' advantages."""
        from mutualrl.regimes.prp.maths import per_source_advantages, prp_pooled_advantages, resolved_grouping

        k = rollouts.num_generations
        groups = rollouts.group_prompt_ids
        order = self.pool_order
        learner_m = order.index(self.policy)

        # Pooled rewards over every rank's groups (so "batch" scaling sees the whole pooled batch).
        peer = gather_peer_groups(peers, [n for n in order if n != self.policy], groups, k, rollouts.step)
        pool = peer.pool(rollouts.rewards_global.view(len(groups), k), learner_m)
        grouping = resolved_grouping(self.settings.advantage_grouping, self.settings.correction)
        advantages = (per_source_advantages if grouping == "source" else prp_pooled_advantages)(
            pool, scale_rewards=self.trainer.scale_rewards, eps=self.settings.std_epsilon)  # [P, M, K]

        n_local = len(rollouts.prompt_ids_local)
        first_group = rollouts.process_index * n_local // k
        local_groups = range(first_group, first_group + n_local // k)
        return peer, advantages, local_groups, advantages[list(local_groups), learner_m].reshape(-1)

    def _peer_rows(self, names, rows, advantages, local_groups, k, scored) -> tuple[list, list, list, list]:
        """Peer rows of this process's groups, (local group, peer, sample) in a fixed order: their (peer, row)
        sources, learner prompt rows, advantages (``advantages``: ``[P, M, K]``) and whether each was scored
        (``scored``: bool ``[P, M-1, K]``). A peer rollout not scored (its reward NaN, TRL's None) keeps its place
        with advantage 0 (and no token in the loss, :meth:`_merged_batch`): every rank then holds ``M·B`` rows, runs
        the same forwards and splits them into whole micro-batches."""
        order = self.pool_order
        source_rows, prompt_rows, peer_adv, row_scored = [], [], [], []
        for local_p, p in enumerate(local_groups):
            for slot, name in enumerate(names):
                m = order.index(name)
                for j, row in enumerate(rows[p, slot].tolist()):  # rows: int64 [P, M-1, K]
                    is_scored = bool(scored[p, slot, j])
                    source_rows.append((name, row))
                    prompt_rows.append(local_p * k)
                    peer_adv.append(float(advantages[p, m, j]) if is_scored else 0.0)
                    row_scored.append(is_scored)
        return source_rows, prompt_rows, peer_adv, row_scored

    def _merged_batch(self, output: GRPOBatch, peer_ids: list[list[int]], prompt_rows: list[int],
                      peer_adv: list[float], scored: torch.Tensor) -> tuple[GRPOBatch, int, torch.Tensor]:
        """TRL's batch with the peer rows after the learner's own (with the learner's prompt tokens),
        padded to one width; returns it, the width and the peer rows' completion mask (0 on an unscored row:
        it adds no token to the loss's normaliser)."""
        device = output["completion_ids"].device
        width = max([output["completion_ids"].size(1)] + [len(ids) for ids in peer_ids])
        pad_id = self.trainer.processing_class.pad_token_id
        peer_completion, peer_mask = pad_token_rows(peer_ids, pad_id, min_width=width, device=device)
        peer_mask = peer_mask * scored[:, None].to(peer_mask.dtype)  # [N, T]
        prompt_index = torch.tensor(prompt_rows, dtype=torch.long, device=device)

        merged = output.copy()
        merged["prompt_ids"] = torch.cat([output["prompt_ids"], output["prompt_ids"][prompt_index]])
        merged["prompt_mask"] = torch.cat([output["prompt_mask"], output["prompt_mask"][prompt_index]])
        merged["completion_ids"] = torch.cat([pad_to_width(output["completion_ids"], width, pad_id), peer_completion])
        merged["completion_mask"] = torch.cat([pad_to_width(output["completion_mask"], width, 0), peer_mask])
        merged["advantages"] = torch.cat([output["advantages"],
                                          torch.tensor(peer_adv, dtype=output["advantages"].dtype, device=device)])
        return merged, width, peer_mask

    def _snapshot(self, output: GRPOBatch, merged: GRPOBatch, n_local: int, width: int) -> torch.Tensor | None:
        """The learner's own log-probs of every merged row, or None where TRL needs none.

        Naive PRP with generation and optimisation aligned: TRL scores nothing and uses the
        detached current log-probs as the old ones, which *is* the learner's snapshot for every
        row -- so the pooled batch keeps that too (no extra scoring pass). Otherwise: the
        learner's snapshot of the rows that lack one (the peer rows; the local rows too if TRL
        did not score them) -- the paper's "PRP adds about one rollout's scoring"; with the peer
        denominator the caller puts the THL-aligned peer trace on the peer rows.
        """
        trainer = self.trainer
        local_old = output.get("old_per_token_logps")
        vllm_sampling = output.get("sampling_per_token_logps") is not None
        if not self.reads_traces and local_old is None and not vllm_sampling:
            return None
        first_scored = n_local if local_old is not None else 0
        with torch.no_grad():
            scored = trainer.score_completions(
                trainer.model, merged["prompt_ids"][first_scored:], merged["prompt_mask"][first_scored:],
                merged["completion_ids"][first_scored:], merged["completion_mask"][first_scored:])
        return scored if local_old is None else torch.cat([pad_to_width(local_old, width, 0.0), scored])

    def _extend_trl_extras(self, output: GRPOBatch, merged: GRPOBatch, behaviour: torch.Tensor | None, n_local: int,
                           n_peer: int, width: int) -> None:
        """TRL's optional per-row tensors (vLLM sampling log-probs, importance-sampling ratio,
        reference log-probs) extended over the peer rows in ``merged``."""
        device = output["completion_ids"].device
        if output.get("sampling_per_token_logps") is not None:
            merged["sampling_per_token_logps"] = torch.cat(
                [pad_to_width(output["sampling_per_token_logps"], width, 0.0), behaviour[n_local:]])
        if output.get("importance_sampling_ratio") is not None:
            ratio = output["importance_sampling_ratio"]
            ones = torch.ones((n_peer, ratio.size(1) if ratio.size(1) == 1 else width), dtype=ratio.dtype,
                              device=device)
            merged["importance_sampling_ratio"] = torch.cat(
                [ratio if ratio.size(1) == 1 else pad_to_width(ratio, width, 1.0), ones])
        if output.get("ref_per_token_logps") is not None:
            ref_peer = self._reference_logps(merged, n_local)
            merged["ref_per_token_logps"] = torch.cat([pad_to_width(output["ref_per_token_logps"], width, 0.0),
                                                       ref_peer])

    # -- THL -------------------------------------------------------------------------------
    def _peer_traces(self, peers: dict[str, pa.Table], step: PRPStep) -> torch.Tensor:
        """The peers' behaviour traces on the learner's tokens ``[N, T]`` (THL); past a row's end (padding, outside
        the mask) the learner's snapshot, so that the ratio there is 1."""
        responses = step.responses
        aligned = self._aligned_traces(peers, step.sources, responses.texts, responses.finished, responses.spans,
                                       responses.ids)
        traces = step.snapshot[step.n_local:].clone()  # [N, T]
        for i, values in enumerate(aligned):
            traces[i, : len(values)] = torch.as_tensor(values, dtype=traces.dtype, device=traces.device)
        return traces

    def _aligned_traces(self, peers, source_rows, texts, finished, target_spans, peer_ids) -> list[np.ndarray]:
        """Peer behaviour traces on the learner's token grid (THL), EOS mapped onto EOS."""
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
        out = []
        for values, ids, done, spans, eos_lp in zip(result.values, peer_ids, finished, target_spans, eos_logps,
                                                    strict=True):
            trace = np.zeros(len(ids), dtype=np.float32)
            n = min(len(values), len(ids))
            trace[:n] = np.nan_to_num(np.asarray(values[:n], dtype=np.float32), nan=0.0)
            if done and eos_lp is not None and len(ids) > len(spans):  # the appended learner EOS
                trace[len(spans)] = eos_lp
            out.append(trace)
        return out

    def _reference_logps(self, merged: GRPOBatch, n_local: int) -> torch.Tensor:
        """Reference-model log-probs of the peer rows (for the KL term when beta > 0)."""
        rows = slice(n_local, None)
        return self.trainer.score_reference(merged["prompt_ids"][rows], merged["prompt_mask"][rows],
                                            merged["completion_ids"][rows], merged["completion_mask"][rows])  # [N, C]

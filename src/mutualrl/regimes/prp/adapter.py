"""Data-level adapter: Peer Rollout Pooling (paper Sec. "Regime 1").

The learner's candidate group for a prompt is its own K rollouts plus every peer's K (the "unified candidate
pool"), with GRPO advantages normalised over the pool. The pooled rows are
:class:`~mutualrl.regimes.core.pooled_rows.PooledRowsAdapter`'s (retokenized into the learner's vocabulary by THL, after
the learner's own rows, with the learner's prompt tokens). Their behaviour log-probs (TRL's
``old_per_token_logps``, the importance-ratio denominator) are either the learner's own snapshot
(``denominator: learner``, naive pooling) or the peer's recorded trace aligned onto the learner's tokens by THL
(``denominator: peer``); TRL's PPO clip (epsilon) then applies to every row. Under a correction the ratio divides by
the snapshot and a peer sample weighs ``T(w)`` (:meth:`PRPAdapter.peer_token_weights`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mutualrl.regimes.api import (
    TOKEN_WEIGHTS,
    CoverLimits,
    GRPOBatch,
    PeerGroups,
    PooledRowsAdapter,
    PooledStep,
    Quantile,
    Share,
    StepRollouts,
    logits_width,
    peer_row_views,
    policy_byte_logps,
    token_pieces,
)
from mutualrl.regimes.prp.spec import PRP, PRPSettings

if TYPE_CHECKING:
    import pyarrow as pa

    from mutualrl.regimes.prp.maths import PPOClip


class PRPAdapter(PooledRowsAdapter):
    spec = PRP
    settings: PRPSettings  # typed view of RegimeAdapter.settings (a variant's subclass of PRPSettings)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.text_divergence: dict[str, float] = {}  # this step's figures of F-TIS's KL over texts
        if self.compares_texts:  # F-TIS's KL over texts: each policy publishes its bytes' log-probs, reads its peers'
            self.text_byte_limits = CoverLimits.of(self.settings)
            self.peer_columns = (*self.peer_columns, "text_byte_logps")

    @property
    def compares_texts(self) -> bool:
        return self.settings.correction == "ftis" and self.settings.kl_over == "texts"

    def transform(self, output: GRPOBatch, rollouts: StepRollouts,
                  peers: dict[str, pa.Table]) -> tuple[GRPOBatch, dict[str, float]]:
        step = self.pool_step(output, rollouts, peers)
        generator = peer_row_views(peers, step.sources, "text_byte_logps") if self.compares_texts else None
        step.kept = self.rows_kept(step, generator)  # once: the loss's weights and the per-source figures read it
        weights = self.peer_token_weights(step)
        if weights is not None:
            own = torch.ones((step.n_local, step.width), dtype=weights.dtype, device=weights.device)  # [B, T]
            step.batch[TOKEN_WEIGHTS] = torch.cat([own, weights])  # [B+N, T]
        return step.batch, {**self.step_metrics(step, weights), **self.text_divergence}

    # -- the hooks of the pooled step -------------------------------------------------------------
    def behaviour_logps(self, step: PooledStep) -> torch.Tensor | None:
        """The ratio's denominator of every row ``[B+N, T]``: the learner's snapshot, with the peers' aligned traces
        on the peer rows under ``denominator: peer`` without a correction (the paper's corrected PRP: TRL's PPO clip
        acts on ``w`` itself). Under a correction the peer rows keep the snapshot too (ratio 1 at generation, inside
        every clip band), and ``w`` enters through the correction's weight ``T(w)`` alone."""
        if step.snapshot is None:
            return None
        if self.denominator == "peer" and self.settings.correction == "none":
            return step.peer_denominator()  # [B+N, T]
        return step.snapshot.clone()  # [B+N, T]

    def peer_token_weights(self, step: PooledStep) -> torch.Tensor | None:
        """Per-token loss weights of the peer rows ``[N, T]`` only, or None: the hook a
        variant overrides. PRP's: ``T(w)`` of its correction (:func:`~mutualrl.regimes.prp.maths.correction_weights`;
        ``correction: none``, the paper's PRP: None), 0 on the rows the loss does not keep (``step.kept``).
        The learner's own rows are not this hook's: :meth:`transform` puts weight 1 on them."""
        from mutualrl.regimes.prp.maths import correction_weights

        settings = self.settings
        if settings.correction == "none":
            return None
        weights = correction_weights(step.peer_log_weights(), step.peer_mask, settings.correction,
                                     settings.correction_level, settings.truncation_bound, settings.drop_bound,
                                     step.peer_groups)  # [N, T] per word where the tokenizations split it apart
        kept = step.kept[:, None]  # bool [N, 1]
        return torch.where(kept, weights, torch.zeros_like(weights))  # [N, T]

    def rows_kept(self, step: PooledStep, generator: list[np.ndarray | None] | None = None) -> torch.Tensor:
        """The peer rows the loss keeps, bool ``[N]``: scored, and under ``ftis`` not dropped by F-TIS's filter
        (advantage <= 0 and sequence KL to the learner >= ``kl_bound``, the KL by ``kl_estimator``;
        :func:`~mutualrl.regimes.prp.maths.ftis_kept`): over texts (``kl_over: texts``, :meth:`kl_over_texts`, from the
        generators' published ``generator`` values of each row), or over the sampled tokens, per word where the two
        tokenizations split it differently."""
        from mutualrl.regimes.prp.maths import ftis_kept, sequence_kl

        kept = step.scored.clone()  # bool [N]
        if self.settings.correction != "ftis" or step.peer_traces is None:
            return kept
        advantages = step.batch["advantages"][step.n_local:]  # [N]
        if self.compares_texts:
            kl = self.kl_over_texts(step, generator or [None] * step.n_peer,
                                    (kept & (advantages <= 0)).cpu())  # [N] float64
        else:
            kl = sequence_kl(step.snapshot[step.n_local:], step.peer_traces, step.peer_mask,
                             self.settings.kl_estimator, step.peer_groups)  # [N] float64, per word where split
        return kept & ftis_kept(advantages, kl.to(advantages.device), self.settings.kl_bound)

    def kl_over_texts(self, step: PooledStep, generator: list[np.ndarray | None],
                      needed: torch.Tensor) -> torch.Tensor:
        """F-TIS's KL over texts ``[N]`` (:func:`~mutualrl.regimes.prp.maths.text_kl`) of the rows ``needed`` (bool
        ``[N]``: scored with advantage <= 0, the rows the filter can drop; NaN elsewhere): the learner's
        probability of each byte of its row's text given the bytes before, over every tokenization of it
        (:func:`~mutualrl.regimes.core.written_bytes.policy_byte_logps`, no gradient), against the generator's
        published one. The row's text is the bytes its learner tokens write (a prefix where the row is cut), or, where
        they write it otherwise (a tokenizer's normalisation) and the row holds its end, the generator's text. A row
        whose generator published none, or cut and written otherwise, is ``+inf`` (dropped)."""
        from mutualrl.regimes.prp.maths import text_kl, written_log_ratios

        eos = self.trainer.processing_class.eos_token_id
        pieces = token_pieces(self.trainer, logits_width(self.trainer.model))
        rows = [i for i in range(step.n_peer) if bool(needed[i])]
        ends = [bool(done) and bool(ids) and ids[-1] == eos
                for ids, done in zip(step.responses.ids, step.responses.finished, strict=True)]
        tokens = [ids[:-1] if end else ids for ids, end in zip(step.responses.ids, ends, strict=True)]
        texts, given, written = [b""] * step.n_peer, [[] for _ in range(step.n_peer)], []
        for i in rows:
            text, own = step.responses.texts[i].encode("utf-8"), pieces.text_of(tokens[i])
            matched = own == text or (text.startswith(own) and not ends[i])  # the whole text, or a cut row's prefix
            if matched or ends[i]:
                texts[i], given[i] = (own, tokens[i]) if matched else (text, [])
                written.append(i)
        prompts = step.batch["prompt_ids"][step.n_local:], step.batch["prompt_mask"][step.n_local:]  # [N, P] each
        learner, dropped = policy_byte_logps(self.trainer, *prompts, written, given, ends, texts,
                                             limits=self.text_byte_limits)  # the limits it publishes under
        deltas = [written_log_ratios(learner.get(i), None if generator[i] is None else torch.from_numpy(
            np.asarray(generator[i], dtype=np.float64))) for i in range(step.n_peer)]
        kl = text_kl(deltas, step.peer_mask.sum(dim=1).cpu(), self.settings.kl_estimator)  # [N] float64
        missing = sum(deltas[i] is None for i in rows)
        self.text_divergence = {"ftis_text_missing": Share(missing, len(rows)),
                                "ftis_cover_dropped": Quantile.largest(dropped)}
        return torch.where(needed, kl, torch.full_like(kl, math.nan))  # [N]

    def source_metrics(self, step: PooledStep) -> dict[str, float]:
        """Per peer (the source of the rows): how off-policy its samples are for this learner and what the loss made of
        them, as ``from/<peer>/<figure>``: ``ess`` (normalised effective sample size of the weights the loss uses, at
        the correction's level: ``T(w)``, 0 on a dropped row; ``w`` itself without a correction), ``ess_raw`` (the same
        of the raw weights ``w``), ``log_ratio_mean`` / ``log_ratio_max`` (raw token ``log w``), ``truncated_share`` /
        ``filtered_share`` (of the correction's units: capped, or keeping no weight), ``used_share`` (of the peer's
        samples of this step's prompts, the rows whose gradient at the snapshot is nonzero on some token: weighted
        advantage ``T(w)·A`` nonzero and, without a correction, inside TRL's PPO clip on ``w`` (:meth:`ppo_clip`);
        a kept row of advantage 0 does not; the generation's later updates are not seen). Only where the peers'
        traces are read (``w`` needs them).
        The ESS is not a ratio of sums, so its sums are reduced over the ranks here (one collective, every rank)."""
        from mutualrl.regimes.prp.maths import source_diagnostics

        if step.peer_traces is None:
            return {}
        settings = self.settings
        advantages = step.batch["advantages"][step.n_local:]  # [N] the peer rows' advantages, as the loss reads them
        rows = source_diagnostics(step.peer_log_weights(), step.peer_mask, settings.correction,
                                  settings.correction_level, settings.truncation_bound, settings.drop_bound,
                                  step.kept, advantages, self.ppo_clip(), step.peer_groups)
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

    def ppo_clip(self) -> PPOClip | None:
        """TRL's clip as it acts on the peer rows at the snapshot where their ratio is ``w`` itself (no correction under
        ``denominator: peer``, a loss type that clips): the trainer's ratio level, clip widths and ``delta``; None
        where the ratio is 1 there (a correction, or ``denominator: learner``) or the loss does not clip."""
        from mutualrl.regimes.prp.maths import CLIPPED_LOSSES, PPOClip

        trainer = self.trainer
        if self.settings.correction != "none" or self.denominator != "peer" or trainer.loss_type not in CLIPPED_LOSSES:
            return None
        return PPOClip(trainer.importance_sampling_level, trainer.epsilon_low, trainer.epsilon_high, trainer.args.delta)

    def _pooled_advantages(self, rollouts: StepRollouts,
                           peers: dict[str, pa.Table]) -> tuple[PeerGroups, torch.Tensor, range, torch.Tensor]:
        """GRPO advantages over the unified candidate pool of every group: the peer groups,
        the advantages ``[groups, policies, K]``, this process's groups and its own rows' advantages."""
        from mutualrl.regimes.api import prp_pooled_advantages
        from mutualrl.regimes.prp.maths import per_source_advantages, resolved_grouping

        peer, pool = self.pooled_rewards(rollouts, peers)
        grouping = resolved_grouping(self.settings.advantage_grouping, self.settings.correction)
        advantages = (per_source_advantages if grouping == "source" else prp_pooled_advantages)(
            pool, scale_rewards=self.trainer.scale_rewards, eps=self.settings.std_epsilon)  # [P, M, K]
        groups = rollouts.local_groups
        return peer, advantages, groups, advantages[list(groups), self.pool_order.index(self.policy)].reshape(-1)

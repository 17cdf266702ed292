"""Adapter of mutual on-policy distillation: every policy judges its peers' rollouts, and learns from their judgements
of its own.

Per step, lock-step (docs/regimes.md, "Beyond the paper: mutual on-policy distillation"):

1. publish this rank's rollout records (with each token's span: this policy aligns onto them) and read the peers'
   round (the base adapter);
2. judge: score every peer rollout of this rank's groups with this policy's model, in its own tokens after its own
   prompt (one no-grad forward pass), and publish one judgement record per peer rollout into that peer's nested
   judgement exchange (:class:`~mutualrl.regimes.core.judgements.JudgementChannel`);
3. wait for the peers' judgements of this policy's round and move each judge's trace onto this policy's tokens (THL);
4. gate per prompt group (a peer teaches where its verified success rate is above the learner's), and write TRL's
   advantages per token: ``c · A_i + λ · s_i · Σ_j w_{p,j} δ^j_t``, ``δ`` the peer's log-ratio to the learner of the
   token where their tokens of its word match, of the whole word where they do not (:mod:`mutualrl.regimes.opd.maths`),
   ``s_i`` the factor that makes TRL's reduction of row ``i`` a constant one (``signal_row_scale``).

With ``lam: 0`` (and the reward term kept) step 4 leaves TRL's advantages as they are: the batch TRL trains on is
standalone GRPO's, bit for bit (the judging still runs, at no gradient).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from mutualrl.regimes.api import (
    CoverLimits,
    GRPOBatch,
    JudgedAdapter,
    Quantile,
    StepRollouts,
    aligned_judgements,
    gather_peer_groups,
    judged_text_logps,
    logits_width,
    own_logps,
    own_texts,
    signal_row_scale,
    text_logps,
    text_signal,
    token_pieces,
)
from mutualrl.regimes.opd.spec import OPD, OPDSettings

if TYPE_CHECKING:
    import pyarrow as pa


class OPDAdapter(JudgedAdapter):
    spec = OPD
    settings: OPDSettings  # typed view of RegimeAdapter.settings

    @property
    def text_limits(self) -> CoverLimits | None:  # signal: sequence compares texts: the judges send their text logps
        if self.settings.signal != "sequence":
            return None
        return CoverLimits.of(self.settings)

    def _own_texts(self, output: GRPOBatch) -> tuple[list[bytes], list[list[int]], list[bool]]:
        """This rank's rows as bytes, their tokens (EOS left out) and whether each finished."""
        mask = output["completion_mask"]  # [B, C]
        pieces = token_pieces(self.trainer, logits_width(self.trainer.model))
        own = own_texts(self.trainer, output["completion_ids"].cpu(), mask.cpu(), pieces)
        return own.texts, own.tokens, own.finished

    def transform(self, output: GRPOBatch, rollouts: StepRollouts,
                  peers: dict[str, pa.Table]) -> tuple[GRPOBatch, dict[str, float]]:
        from mutualrl.regimes.opd.maths import (
            distillation_signal,
            opd_advantages,
            opd_metrics,
            row_weights,
            source_use,
            success_rates,
            teacher_weights,
            teaching_peers,
        )

        settings, trainer, step = self.settings, self.trainer, rollouts.step
        judged, tables = self.exchange_judgements(output, rollouts, peers)

        k = rollouts.num_generations
        prompts = rollouts.prompt_ids_local[::k]
        peer = gather_peer_groups(peers, self.peers, prompts, k, step, columns=("reward",))
        own_rate = success_rates(rollouts.rewards_local.float().view(len(prompts), k), settings.success_threshold)
        peer_rates = success_rates(peer.values["reward"], settings.success_threshold)  # [P, M-1]
        teaching = teaching_peers(own_rate, peer_rates, settings.gate)  # [P, M-1]
        prompt_weights = teacher_weights(teaching, peer_rates, settings.teachers)  # [P, M-1]
        mask = output["completion_mask"]  # [B, C]
        aligned = aligned_judgements(self.own_records, tables, self.peers, rollouts, mask.shape[1])
        weights = row_weights(prompt_weights, k) * aligned.matched  # [B, M-1]
        if settings.lam == 0 and settings.reward_term:  # standalone GRPO's batch, untouched
            metrics = opd_metrics(teaching, prompt_weights, aligned.matched, judged.rows)
            return output, {**metrics, **source_use(None, None, None, weights, 0.0, self.peers)}
        own = own_logps(trainer, output).float().cpu()  # [B, C]
        sequence = settings.signal == "sequence"
        scale = signal_row_scale(trainer.loss_type, mask.cpu(), trainer.max_completion_length or mask.shape[1],
                                 self._items(output), rollouts.num_processes)  # [B] TRL's row weights
        if sequence:  # the texts' log-ratio, each side over every tokenization of the text
            texts, tokens, finished = self._own_texts(output)
            published = self.own_records.column("response_text").to_pylist()
            own_text, dropped = text_logps(trainer, trainer.model, output["prompt_ids"], output["prompt_mask"], texts,
                                           tokens, finished, self.text_limits)  # [B]
            judge_text, found = judged_text_logps(tables, self.peers, rollouts, published)  # [B, M-1]
            found &= torch.tensor([text == words.encode("utf-8") for text, words in zip(texts, published,
                                                                                          strict=True)])[:, None]
            signal = text_signal(own_text, judge_text, aligned.valid, weights * found) * scale[:, None]  # [B, C]
        else:
            signal = distillation_signal(own, aligned.values, aligned.valid, weights, aligned.groups) \
                * scale[:, None]  # [B, C]
        advantages = output["advantages"]
        output["advantages"] = opd_advantages(advantages.cpu(), signal, mask.cpu(), settings.lam,
                                              settings.reward_term).to(advantages.device)  # [B, C]
        metrics = opd_metrics(teaching, prompt_weights, aligned.matched, judged.rows, own, aligned.values,
                              aligned.valid, weights, settings.lam, signal)
        used = source_use(own, aligned.values, aligned.valid, weights, settings.lam, self.peers, aligned.groups,
                          sequence=sequence)
        if sequence:  # the largest share of an offset's mass the limits dropped from the learner's texts
            metrics["text_cover_dropped"] = Quantile.largest(dropped)
        return output, {**metrics, **used}

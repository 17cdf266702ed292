"""Adapter of next-byte distillation (``byte-kd``): every policy judges its peers' rollouts and publishes, with each
judgement, its next-byte distribution at each of its tokens; it learns from its peers' distributions at the shared
token boundaries of its own rollouts.

Per step, lock-step (docs/regimes.md, "Beyond the paper: next-byte distillation"):

1. publish this rank's rollout records with their token spans and read the peers' round (the base adapter);
2. judge every peer rollout of this rank's groups (one no-grad forward, its logits reduced to the ``top_bytes`` most
   likely next-byte symbols per token) and publish the judgements; read the peers' judgements of this policy's round;
3. gate per prompt (OPD's: the most competent peer above the learner teaches; with ``gate: blind-spot`` only where
   every own rollout failed) and find, for each own token, the judge's token that starts at the same offset where
   both start on a boundary;
4. put the teacher's symbols, log-masses and weights into TRL's batch; :meth:`ByteKDAdapter.extra_loss` runs the
   learner's forward on the taught rows and adds ``λ Σ w KL(q_T ‖ q_θ)`` (:func:`~mutualrl.regimes.bytekd.maths.
   symbol_kl`) to TRL's loss, reduced as TRL reduces its own;
5. with ``rescue_lam > 0``, SGT's rescue in the same loss: where every own rollout of a prompt failed and a peer's
   succeeded (under the run's budget), one chosen peer success, retokenized, rides on the prompt's first row and
   ``extra_loss`` adds ``λ_r`` times its NLL (:class:`~mutualrl.regimes.core.rescue.RescueBudget`).

With ``lam: 0`` and ``rescue_lam: 0`` steps 4-5 are skipped: the batch TRL trains on is standalone GRPO's, bit for
bit (the judging still runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import torch

from mutualrl.regimes.api import (
    GRPOBatch,
    JudgedAdapter,
    RescueBudget,
    Share,
    StepRollouts,
    Total,
    CoverLimits,
    clean_starts,
    first_byte_symbols,
    gather_peer_groups,
    judgement_sources,
    logits_width,
    next_byte_logps,
    peer_row_views,
    peer_rows,
    success_rates,
    teacher_weights,
    token_pieces,
)
from mutualrl.regimes.bytekd.exact import (empty_teacher_tensors, exact_kl_term, exact_teacher_distributions,
                                          own_texts)
from mutualrl.regimes.bytekd.maths import shared_boundaries, symbol_kl, teaching_gate
from mutualrl.regimes.bytekd.spec import BYTE_KD, ByteKDSettings

if TYPE_CHECKING:
    import pyarrow as pa

PREFIX: Final = "bytekd"
"""The prefix of the batch keys this regime adds (``spec.ByteKDBatch``)."""


@dataclass
class TeacherDistributions:
    """Each judge's published next-byte symbols on this rank's own tokens: ``ids`` int64 ``[B, J, C, k]``, ``logps``
    float32 ``[B, J, C, k]`` (0 where not ``shared``), ``shared`` bool ``[B, J, C]`` (the own token starts on a
    boundary the judge's tokens share, and the judge published its distribution there), ``matched`` bool ``[B, J]`` (a
    judgement of this row's text arrived)."""

    ids: torch.Tensor
    logps: torch.Tensor
    shared: torch.Tensor
    matched: torch.Tensor


def teacher_distributions(own: pa.Table, judgements: dict[str, pa.Table], judges: list[str], rollouts: StepRollouts,
                          width: int, k: int) -> TeacherDistributions:
    """The judges' next-byte distributions at the shared boundaries of this rank's own tokens (``own``: its published
    records with spans, row ``i`` = TRL's row ``i``; ``width``: the batch's completion width). A judgement whose text
    is not the row's is not used; one without distributions (``k`` per token) is matched but shares no boundary."""
    n = own.num_rows
    texts = own.column("response_text").to_pylist()
    own_spans = peer_row_views({"": own}, [("", i) for i in range(n)], "response_token_spans")
    ids, logps, shared, matched = empty_teacher_tensors(n, len(judges), width, k)
    pairs, sources = judgement_sources(judgements, judges, rollouts, n)
    their_texts = peer_rows(judgements, sources, ("response_text",))["response_text"]
    spans = peer_row_views(judgements, sources, "response_token_spans")
    symbols = peer_row_views(judgements, sources, "next_byte_ids")
    masses = peer_row_views(judgements, sources, "next_byte_logps")
    for x, (i, j) in enumerate(pairs):
        if their_texts[x] != texts[i] or spans[x] is None:
            continue
        matched[i, j] = True
        theirs = spans[x].astype(np.int64).reshape(-1, 2)  # [m, 2]
        if symbols[x] is None or masses[x] is None or len(symbols[x]) != k * len(theirs) \
                or len(masses[x]) != k * len(theirs):
            continue
        mine = clean_starts(own_spans[i].astype(np.int64).reshape(-1, 2), len(texts[i]))[:width]  # [n_i]
        at = shared_boundaries(mine, clean_starts(theirs, len(texts[i])))  # [n_i] judge token, -1: none
        hit = np.flatnonzero(at >= 0)
        ids[i, j, hit] = torch.from_numpy(symbols[x].astype(np.int64).reshape(-1, k)[at[hit]])  # [h, k]
        logps[i, j, hit] = torch.from_numpy(masses[x].astype(np.float32).reshape(-1, k)[at[hit]])  # [h, k]
        shared[i, j, hit] = True
    return TeacherDistributions(ids, logps, shared, matched)


class ByteKDAdapter(JudgedAdapter):
    spec = BYTE_KD
    settings: ByteKDSettings  # typed view of RegimeAdapter.settings

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.symbols: torch.Tensor | None = None  # [V] the learner's next-byte symbol of each token id
        self.rescues = RescueBudget(PREFIX, self.settings.rescue_reduction)

    def state_dict(self) -> dict[str, Any]:
        """The rescue counters: the run's total and, per prompt, the steps that rescued it (the budget)."""
        return self.rescues.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rescues.load_state_dict(state)

    @property
    def top_bytes(self) -> int:  # the judges publish this many next-byte symbols per token (per byte with 'exact')
        return self.settings.top_bytes

    @property
    def byte_covers(self) -> CoverLimits | None:  # 'exact': the judges' distributions at every byte offset
        if self.settings.distribution != "exact":
            return None
        return CoverLimits.of(self.settings)

    def transform(self, output: GRPOBatch, rollouts: StepRollouts,
                  peers: dict[str, pa.Table]) -> tuple[GRPOBatch, dict[str, float]]:
        settings, k = self.settings, rollouts.num_generations
        _, tables = self.exchange_judgements(output, rollouts, peers)
        prompts = rollouts.prompt_ids_local[::k]
        peer = gather_peer_groups(peers, self.peers, prompts, k, rollouts.step, columns=("reward",))
        own_rewards = rollouts.rewards_local.float().view(len(prompts), k)  # [P, K]
        own_rate = success_rates(own_rewards, settings.success_threshold)  # [P]
        peer_rates = success_rates(peer.values["reward"], settings.success_threshold)  # [P, J]
        teaching = teaching_gate(own_rate, peer_rates, own_rewards, settings.failure_threshold, settings.gate)  # [P, J]
        prompt_weights = teacher_weights(teaching, peer_rates, "best")  # [P, J]
        mask = output["completion_mask"]  # [B, C]
        if self.byte_covers is not None:
            teacher, positions = self._exact_teachers(output, rollouts, tables)  # positions: [B, O] byte offsets
        else:
            teacher = teacher_distributions(self.own_records, tables, self.peers, rollouts, mask.shape[1],
                                            settings.top_bytes)
            positions = mask.cpu().bool()  # [B, C]
        row_weights = prompt_weights.repeat_interleave(k, dim=0) * teacher.matched  # [B, J]
        weights = row_weights[:, :, None] * teacher.shared * positions[:, None, :]  # [B, J, C or O]
        taught = row_weights > 0  # [B, J]
        own_tokens = positions[:, None, :] & taught[:, :, None]  # [B, J, C or O]
        metrics: dict[str, float] = {
            "gate_rate": Share(float(teaching.any(-1).sum()), teaching.shape[0]),
            "judged_share": Share(float(teacher.matched.sum()), teacher.matched.numel()),
            "shared_share": Share(float((weights > 0).sum()), float(own_tokens.sum())),
        }
        distilled = (weights > 0).any(-1) if settings.lam > 0 else torch.zeros(weights.shape[:2], dtype=torch.bool)
        source = torch.full((weights.shape[0],), -1, dtype=torch.long)  # [B] the rescue's peer slot
        if settings.rescue_lam > 0:
            source = self._rescue(output, rollouts, peers, peer.rows, own_rewards, peer.values["reward"], prompts,
                                  metrics)
        for j, name in enumerate(self.peers):
            metrics[f"from/{name}/used_share"] = Share(float((distilled[:, j] | (source == j)).sum()),
                                                       weights.shape[0])  # rows whose loss peer j changed
        if settings.lam > 0:
            device = mask.device
            output[f"{PREFIX}_ids"] = teacher.ids.to(device)  # [B, J, C, k]
            output[f"{PREFIX}_logps"] = teacher.logps.to(device)  # [B, J, C, k]
            output[f"{PREFIX}_weights"] = weights.to(device)  # [B, J, C]
        return output, metrics

    def _exact_teachers(self, output: GRPOBatch, rollouts: StepRollouts,
                        tables: dict[str, pa.Table]) -> tuple[TeacherDistributions, torch.Tensor]:
        """The judges' exact distributions at every byte offset of this rank's texts, and the offsets each row has
        (bool ``[B, O]``)."""
        mask = output["completion_mask"]  # [B, C]
        pieces = token_pieces(self.trainer, logits_width(self.trainer.model))
        own = own_texts(self.trainer, output["completion_ids"].cpu(), mask.cpu(), pieces)
        ids, logps, shared, matched = exact_teacher_distributions(own, tables, self.peers, rollouts,
                                                                  self.settings.top_bytes)
        lengths = torch.tensor([len(text) + 1 for text in own.texts])  # [B]
        positions = torch.arange(ids.shape[2])[None, :] < lengths[:, None]  # [B, O]
        return TeacherDistributions(ids, logps, shared, matched), positions

    def _rescue(self, output: GRPOBatch, rollouts: StepRollouts, peers: dict[str, pa.Table], peer_rows: torch.Tensor,
                own_rewards: torch.Tensor, peer_rewards: torch.Tensor, prompts: list[str],
                metrics: dict[str, float]) -> torch.Tensor:
        """SGT's rescue (step 5): select (gate, choose, count) and attach; returns each row's rescue peer slot ``[B]``.
        ``own_rewards`` ``[P, K]``, ``peer_rewards`` and ``peer_rows`` ``[P, J, K]``."""
        settings = self.settings
        gated, chosen = self.rescues.select(own_rewards, peer_rewards, prompts, settings.success_threshold,
                                            settings.failure_threshold, settings.max_rescues_per_prompt,
                                            self.seeded_generator(rollouts.step, self.name), rollouts)  # [P], [P, 2]
        metrics.update({"rescue_rate": Share(float(gated.sum()), len(prompts)), "rescues": Total(float(gated.sum())),
                        "rescues_total": self.rescues.rescues_total})
        return self.rescues.attach(self.trainer, output, rollouts, peers, self.peers, peer_rows, gated, chosen,
                                   settings.rescue_lam)

    def extra_loss(self, model: torch.nn.Module, inputs: GRPOBatch) -> torch.Tensor | None:
        """``λ`` times the next-byte KL of this micro-batch's taught rows, plus ``λ_r`` times the NLL of its rescues
        (with ``rescue_lam``); None where neither term is in the batch."""
        kl, rescue = self._kl_term(model, inputs), self.rescues.loss(self.trainer, model, inputs, self.name)
        if kl is None or rescue is None:
            return rescue if kl is None else kl
        return kl + rescue

    def _kl_term(self, model: torch.nn.Module, inputs: GRPOBatch) -> torch.Tensor | None:
        """``λ`` times the next-byte KL of this micro-batch's taught rows (:func:`~mutualrl.regimes.bytekd.maths.
        symbol_kl`), reduced as TRL reduces its per-token loss. With several ranks a rank with no taught row still
        runs the forward on row 0 (at weight 0), so that every rank runs the same forward and backward."""
        weights = inputs.get(f"{PREFIX}_weights")  # [B, J, C]
        if weights is None:
            return None
        if self.byte_covers is not None:
            loss, values = exact_kl_term(self.trainer, model, inputs, PREFIX, self.settings.lam, self.byte_covers)
            if loss is not None:
                self.trainer.record_metrics({f"{self.name}/{key}": value for key, value in values.items()},
                                            mode="train" if model.training else "eval")
            return loss
        rows = torch.nonzero((weights > 0).flatten(1).any(1), as_tuple=True)[0]  # [R]
        if rows.numel() == 0:
            if self.trainer.accelerator.num_processes == 1:
                return None
            rows = torch.zeros(1, dtype=torch.long, device=weights.device)  # [1]
        trainer, mask = self.trainer, inputs["completion_mask"]
        logits = trainer.completion_logits(model, inputs["prompt_ids"][rows], inputs["prompt_mask"][rows],
                                           inputs["completion_ids"][rows], mask[rows])  # [R, C, V]
        if self.symbols is None or self.symbols.shape[0] != logits.shape[-1]:
            self.symbols = first_byte_symbols(trainer.processing_class, logits.shape[-1], trainer.eos_token_ids)  # [V]
        own_logq = next_byte_logps(logits, self.symbols)  # [R, C, 258] keeping only the logits for the backward
        kl = symbol_kl(own_logq, inputs[f"{PREFIX}_ids"][rows], inputs[f"{PREFIX}_logps"][rows],
                       weights[rows])  # [R, C]
        per_token = torch.zeros(mask.shape, dtype=kl.dtype, device=kl.device).index_put((rows,), kl)  # [B, C]
        loss = self.settings.lam * trainer.aggregate_loss(per_token, mask, inputs)
        shared = weights[rows].sum(1) > 0  # [R, C]
        values = {"kl_term": loss.detach().item(),
                  "byte_kl": Share(float(kl.detach()[shared].double().sum()), int(shared.sum()))}
        trainer.record_metrics({f"{self.name}/{key}": value for key, value in values.items()},
                               mode="train" if model.training else "eval")
        return loss

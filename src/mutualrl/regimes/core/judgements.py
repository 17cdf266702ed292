"""Peers' judgements of a learner's rollouts: each peer's forward pass over the learner's text, through the SEE.

A regime whose learner learns from its peers' log-probabilities of the learner's *own* samples (on-policy
distillation) needs each peer to score text that peer did not generate. The peer has its model; the learner has only
its own. So every policy, once it has read its peers' round (their rollout records: prompt id, sample index, text,
finished flag), also *judges* them (:func:`judge_rollouts`): it retokenizes each peer rollout's text into its own
vocabulary (THL), appends its own EOS where the rollout finished, and scores it after its own prompt tokens of the
same prompt, with no gradient, at the weights it has at that step. It publishes one judgement record per peer
rollout, a :class:`~mutualrl.see.records.RolloutBatch` row of the usual schema read as:

=====================  ==========================================================================================
column                 in a judgement record
=====================  ==========================================================================================
prompt_id, sample_index  the judged rollout's (the learner's keys)
prompt_text            the judge's own prompt (what it conditioned on)
response_text          the learner's text, as the learner published it
response_token_ids     the judge's tokens of that text (its EOS appended where the learner finished)
response_token_spans   each judge token's character span in the text; ``(-1, -1)`` for the EOS
behaviour_logps        the judge's log-probs of its tokens: ``log π_judge(token | its prompt, the text before)``
reward, finished       the learner's (as read)
advantage              null; with text marginals (OPD's ``signal: sequence``) the judge's log-probability of the text
                       summed over every tokenization of it (:mod:`~mutualrl.regimes.core.byte_covers`)
next_byte_ids,         with ``top_bytes`` (byte-kd): before each judge token, its ``k`` most likely next-byte symbols
next_byte_logps        and their log-masses (:mod:`~mutualrl.regimes.core.next_bytes`); null otherwise
=====================  ==========================================================================================

into a nested exchange per judged policy (:class:`JudgementChannel`; ``<see>/_judgements/<learner>/``, the
exchange's own layout: one folder per judge and step, shards per rank, manifests, checksums). The learner waits for
its peers' judgements of its round under the exchange's lock-step rules (failure markers end the wait at once; a
judge that shows no progress for ``see.barrier_timeout_s`` ends it with the barrier's timeout) and aligns each
judge's trace onto its own tokens (:func:`aligned_judgements`, THL: per text unit, mass conserved).

Cost: one no-grad forward pass per peer rollout judged (with ``top_bytes``, its logits reduced a scoring batch at a
time) (``(M-1)·B`` rows per rank and step, of the judge's own
length for the text) and the wait for the slowest judge.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mutualrl.regimes.core.peer_responses import learner_responses, peer_row_views, peer_rows
from mutualrl.regimes.core.peers import gather_peer_groups
from mutualrl.regimes.core.rank_metrics import Quantile
from mutualrl.regimes.core.trainer_interface import GRPOBatch, StepRollouts, TrainerView

if TYPE_CHECKING:
    import pyarrow as pa

    from mutualrl.regimes.core.cover_scoring import CoverLimits

    from mutualrl.see.exchange import ExperienceExchange
    from mutualrl.see.records import RolloutBatch

JUDGEMENT_COLUMNS = ("prompt_id", "sample_index", "response_text", "response_token_spans", "behaviour_logps",
                     "finished")
"""What a learner reads of its judges' records."""

DISTRIBUTION_COLUMNS = ("next_byte_ids", "next_byte_logps")
"""What a learner also reads where its judges publish next-byte distributions (byte-kd)."""

WAIT_SLICE_S = 10.0
"""The judgements' barrier is waited in slices of this length (each slice ends with a look at the judges' progress in
the main exchange, where their heartbeats are)."""


class JudgementChannel:
    """This rank's clients of the nested judgement exchanges: one per peer it judges (it publishes there as itself)
    and its own (its peers publish their judgements of its rollouts there; it waits and reads)."""

    def __init__(self, exchange: ExperienceExchange, peers: Sequence[str]):
        from mutualrl.see.exchange import ExperienceExchange
        from mutualrl.see.files import judgements_root

        self.main = exchange
        self.peers = list(peers)

        def client(judged: str, policies: Sequence[str], timeout: float) -> ExperienceExchange:
            nested = ExperienceExchange(
                judgements_root(exchange.root, judged), exchange.run_id, exchange.policy, rank=exchange.rank,
                world_size=exchange.world_size, policies=policies, barrier_timeout_s=timeout,
                poll_interval_s=exchange.poll_interval_s, retention_steps=exchange.retention_steps,
                provenance=exchange.provenance)
            for peer in policies:  # the world sizes the main exchange knows (a shared filesystem's listing may lag)
                if peer != exchange.policy and exchange.known_worlds(peer):
                    nested._worlds[peer] = set(exchange.known_worlds(peer))
            return nested

        self.outgoing = {peer: client(peer, [peer, exchange.policy], exchange.barrier_timeout_s) for peer in self.peers}
        self.incoming = client(exchange.policy, [exchange.policy, *self.peers],
                               min(WAIT_SLICE_S, exchange.barrier_timeout_s))

    def publish(self, step: int, judged: str, records: RolloutBatch) -> None:
        """This rank's judgements of ``judged``'s rollouts of round ``step``."""
        self.outgoing[judged].publish(step, records)

    def read(self, step: int, judges: Sequence[str],
             columns: Sequence[str] = JUDGEMENT_COLUMNS) -> dict[str, pa.Table]:
        """Every judge's records of this policy's round ``step`` (all of a judge's ranks, concatenated in rank order),
        read as the SEE reads a round: checksums, schema and rows verified. Waits for them: a judge's failure marker
        (in the main exchange) ends the wait at once; a judge whose heartbeat in the main exchange shows no progress
        for ``see.barrier_timeout_s`` ends it with the barrier's timeout error."""
        from mutualrl.see.errors import PeerTimeoutError
        from mutualrl.see.liveness import HeartbeatWatch

        judges = list(judges)
        watch = HeartbeatWatch(self.main.root)
        watch.look()
        progressed = time.monotonic()

        def failed(judge: str) -> bool:  # called on every poll for a judge still missing
            self.main.raise_if_failed(judge, step)
            return False

        self.main.waiting = True  # the heartbeat thread counts no waiting as work
        try:
            while True:
                try:
                    found = self.incoming.wait_for(step, judges, arrived=failed)
                    break
                except PeerTimeoutError:
                    watch.look()
                    idle = watch.idle_for(judges)
                    now = time.monotonic()
                    if idle is not None:
                        progressed = max(progressed, now - idle)
                    if now - progressed >= self.main.barrier_timeout_s:
                        raise
        finally:
            self.main.waiting = False
        return {judge: self.incoming.read_shards(found[judge], columns=list(columns)) for judge in judges}

    def prune(self, step: int) -> None:
        """Drop this rank's own judgement shards older than the exchange's retention."""
        for client in self.outgoing.values():
            client.prune(step)


@dataclass
class Judged:
    """This rank's judgements of one step: the records per judged peer, the rows and tokens it scored."""

    records: dict[str, RolloutBatch]
    rows: int
    tokens: int


def judge_rollouts(trainer: TrainerView, output: GRPOBatch, rollouts: StepRollouts, peers: dict[str, pa.Table],
                   names: Sequence[str], top_bytes: int = 0, covers: CoverLimits | None = None,
                   text_limits: CoverLimits | None = None) -> Judged:
    """Score the peers ``names``' rollouts of this rank's groups with this policy's model (one no-grad forward pass
    over all of them, at TRL's scoring batch size): their text in this policy's tokens after this policy's own prompt
    tokens of the prompt; the judgement records per peer (module docstring). A peer's table must hold the columns
    ``prompt_id``, ``sample_index``, ``reward``, ``response_text``, ``finished``. ``top_bytes`` > 0: each record
    also carries, at each of the judge's tokens, its ``top_bytes`` most likely next-byte symbols and their log-masses
    (:mod:`~mutualrl.regimes.core.next_bytes`; byte-kd's teacher distribution); with ``covers``, its exact next-byte
    distribution at every byte offset of the text instead, ``n + 1`` rows of ``top_bytes`` for a text of ``n`` bytes
    (:mod:`~mutualrl.regimes.core.byte_covers`). ``text_limits``: each record's ``advantage`` is the judge's
    log-probability of the text over every tokenization these limits keep (OPD's ``signal: sequence``; the largest
    share they dropped is logged as ``mutual/text_cover_dropped``)."""
    from mutualrl.padding import pad_token_rows
    from mutualrl.regimes.core.publication import _prompt_text
    from mutualrl.see.records import Ragged, RolloutBatch

    rollouts.require_whole_groups("judging peers")
    k = rollouts.num_generations
    prompts = rollouts.prompt_ids_local[::k]
    groups = gather_peer_groups(peers, names, prompts, k, rollouts.step, columns=("reward",))
    sources: list[tuple[str, int]] = []
    keys: list[tuple[int, int]] = []  # (local prompt, sample index) of each source
    for slot, name in enumerate(names):
        for p in range(len(prompts)):
            for s in range(k):
                sources.append((name, int(groups.rows[p, slot, s])))
                keys.append((p, s))
    tokenizer = trainer.processing_class
    responses = learner_responses(peers, sources, tokenizer, None)  # this policy's tokens, its EOS where finished
    device = output["prompt_ids"].device
    prompt_rows = torch.tensor([p * k for p, _ in keys], dtype=torch.long, device=device)  # [N]
    completion_ids, completion_mask = pad_token_rows(responses.ids, tokenizer.pad_token_id, min_width=1,
                                                     device=device)  # [N, C']
    prompt_ids, prompt_mask = output["prompt_ids"][prompt_rows], output["prompt_mask"][prompt_rows]  # [N, P]
    symbols = symbol_logps = None
    exact, marginals = _over_texts(trainer, responses, prompt_ids, prompt_mask, top_bytes if covers else 0, covers,
                                   text_limits)
    if top_bytes > 0 and covers is None:
        logps, symbols, symbol_logps = _judge_distributions(trainer, prompt_ids, prompt_mask, completion_ids,
                                                            completion_mask, top_bytes)
    if top_bytes == 0 or covers is not None:
        with torch.no_grad():
            logps = trainer.score_completions(trainer.model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    logps = logps.detach().float().cpu()  # [N, C']
    texts = [_prompt_text(prompt) for prompt in rollouts.prompt_texts_local[::k]]
    rewards = peer_rows(peers, sources, ("reward",))["reward"]
    records, start = {}, 0
    for name in names:
        end = start + len(prompts) * k
        part = range(start, end)
        spans = [np.concatenate([responses.spans[i], np.full((len(responses.ids[i]) - len(responses.spans[i]), 2), -1,
                                                              dtype=np.int64)]) for i in part]  # [n_i, 2] EOS: -1
        records[name] = RolloutBatch(
            prompt_id=[prompts[keys[i][0]] for i in part], sample_index=[keys[i][1] for i in part],
            prompt_text=[texts[keys[i][0]] for i in part], response_text=[responses.texts[i] for i in part],
            response_token_ids=[responses.ids[i] for i in part], response_token_spans=spans,
            reward=np.asarray([rewards[i] for i in part], dtype=np.float32),
            finished=[responses.finished[i] for i in part],
            advantage=None if marginals is None else [float(v) if np.isfinite(v) else None
                                                      for v in marginals[start:end].tolist()],
            behaviour_logps=Ragged.from_padded(logps[start:end], completion_mask[start:end].cpu(), np.float32),
            **({} if exact is None else {
                "next_byte_ids": Ragged.from_rows([exact[0][i].reshape(-1) for i in part], np.int32),
                "next_byte_logps": Ragged.from_rows([exact[1][i].reshape(-1) for i in part], np.float32)}),
            **({} if symbols is None else {
                "next_byte_ids": _per_token_rows(symbols[start:end], completion_mask[start:end].cpu(), np.int32),
                "next_byte_logps": _per_token_rows(symbol_logps[start:end], completion_mask[start:end].cpu(),
                                                   np.float32)}),
        )
        start = end
    return Judged(records, len(sources), int(completion_mask.sum()))


def _over_texts(trainer: TrainerView, responses: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                top_bytes: int, covers: CoverLimits | None,
                text_limits: CoverLimits | None) -> tuple[Any, torch.Tensor | None]:
    """What the judge computes over every tokenization of each text (:mod:`~mutualrl.regimes.core.byte_covers`):
    with ``top_bytes`` and ``covers``, its exact next-byte distributions (per text ``[n + 1, k]`` ids and log-masses,
    and the largest share dropped), else None; with ``text_limits``, each text's log-probability ``[N]`` under
    them, else None."""
    from mutualrl.regimes.core.cover_scoring import judge_next_bytes, text_logps

    eos = trainer.processing_class.eos_token_id
    given = [ids[:-1] if done and ids and ids[-1] == eos else ids
             for ids, done in zip(responses.ids, responses.finished, strict=True)]  # the text's tokens, EOS left out
    texts = [text.encode("utf-8") for text in responses.texts]
    exact = marginals = None
    if top_bytes > 0 and covers is not None:
        exact = judge_next_bytes(trainer, prompt_ids, prompt_mask, texts, given, top_bytes, covers)
        trainer.record_metrics({"mutual/cover_dropped": Quantile.largest(exact[2])})
    if text_limits is not None:
        marginals, dropped = text_logps(trainer, trainer.model, prompt_ids, prompt_mask, texts, given,
                                        responses.finished, text_limits)
        trainer.record_metrics({"mutual/text_cover_dropped": Quantile.largest(dropped)})
    return exact, marginals


def _judge_distributions(trainer: TrainerView, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                         completion_ids: torch.Tensor, completion_mask: torch.Tensor,
                         top_bytes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The judge's log-probs of its tokens ``[N, C']`` and, before each, its ``top_bytes`` most likely next-byte
    symbols and their log-masses ``[N, C', k]`` each: one no-grad forward per scoring batch, its logits reduced
    there (a batch's ``[n, C', V]`` logits at a time)."""
    from mutualrl.regimes.core.next_bytes import first_byte_symbols, top_symbols

    size = trainer.args.per_device_train_batch_size
    logps, ids, masses = [], [], []
    table = None
    with torch.no_grad():
        for start in range(0, completion_ids.size(0), size):
            rows = slice(start, start + size)
            logits = trainer.completion_logits(trainer.model, prompt_ids[rows], prompt_mask[rows],
                                               completion_ids[rows], completion_mask[rows])  # [n, C', V]
            if table is None:
                table = first_byte_symbols(trainer.processing_class, logits.shape[-1], trainer.eos_token_ids)  # [V]
            token_logps = torch.log_softmax(logits, dim=-1)  # [n, C', V]
            logps.append(token_logps.gather(-1, completion_ids[rows, :, None]).squeeze(-1).cpu())  # [n, C']
            top_ids, top_logps = top_symbols(token_logps, table, top_bytes)  # [n, C', k] each
            ids.append(top_ids.cpu())
            masses.append(top_logps.cpu())
    return torch.cat(logps), torch.cat(ids), torch.cat(masses)


def _per_token_rows(padded: torch.Tensor, mask: torch.Tensor, dtype: type) -> Any:
    """``[N, C', k]`` values per token → ragged rows of ``k`` values per kept token (the mask's), flattened."""
    from mutualrl.see.records import Ragged

    kept = mask.bool()  # [N, C']
    return Ragged.from_rows([padded[i][kept[i]].reshape(-1) for i in range(padded.shape[0])], dtype)


@dataclass
class AlignedJudgements:
    """Every judge's trace on this rank's own tokens: ``values`` float32 ``[B, M-1, T]`` (0 where not ``valid``),
    ``valid`` bool ``[B, M-1, T]`` (the tokens of a text unit the judge scored, and the learner's EOS where both
    ended), ``matched`` bool ``[B, M-1]`` (a judgement of this row's text arrived), ``groups`` int64 ``[B, M-1, T]``
    (each token's comparison unit, :mod:`~mutualrl.regimes.core.word_units`: itself where the judge's tokens of its
    word are the learner's, else the word's first token)."""

    values: torch.Tensor
    valid: torch.Tensor
    matched: torch.Tensor
    groups: torch.Tensor


def judgement_sources(judgements: dict[str, pa.Table], judges: Sequence[str], rollouts: StepRollouts,
                      rows: int) -> tuple[list[tuple[int, int]], list[tuple[str, int]]]:
    """Each (own row ``i``, judge ``j``) of this rank's ``rows``, row-major, and the judge's record of that rollout
    (``(judge, row in its table)``, found by the rollout's prompt and sample index)."""
    k = rollouts.num_generations
    groups = gather_peer_groups(judgements, judges, rollouts.prompt_ids_local[::k], k, rollouts.step, columns=())
    pairs = [(i, j) for i in range(rows) for j in range(len(judges))]
    sources = [(judges[j], int(groups.rows[i // k, j, rollouts.sample_index_local[i]])) for i, j in pairs]
    return pairs, sources


def aligned_judgements(own: pa.Table, judgements: dict[str, pa.Table], judges: Sequence[str], rollouts: StepRollouts,
                       width: int) -> AlignedJudgements:
    """The judges' traces moved onto this rank's own tokens (THL, one batched call): ``own`` is this rank's own
    published records with token spans (row ``i`` = TRL's row ``i``), ``width`` the batch's completion width. A
    judgement whose text is not the row's (two groups of one prompt in a step share their keys) is not used."""
    from mutualrl.regimes.core.word_units import comparison_groups, singleton_groups
    from mutualrl.thl import align_logprobs

    n = own.num_rows
    own_texts = own.column("response_text").to_pylist()
    own_finished = own.column("finished").to_pylist()
    own_spans = peer_row_views({"": own}, [("", i) for i in range(n)], "response_token_spans")
    values = torch.zeros((n, len(judges), width), dtype=torch.float32)
    valid = torch.zeros((n, len(judges), width), dtype=torch.bool)
    matched = torch.zeros((n, len(judges)), dtype=torch.bool)
    units_of = singleton_groups((n, len(judges), width))  # [B, M-1, T] comparison units
    pairs, sources = judgement_sources(judgements, judges, rollouts, n)
    texts = peer_rows(judgements, sources, ("response_text", "finished"))
    spans = peer_row_views(judgements, sources, "response_token_spans")
    logps = peer_row_views(judgements, sources, "behaviour_logps")
    use = [texts["response_text"][x] == own_texts[i] and spans[x] is not None and logps[x] is not None
           and len(spans[x]) == 2 * len(logps[x]) for x, (i, _) in enumerate(pairs)]
    chosen = [x for x, ok in enumerate(use) if ok]
    if chosen:
        src_spans = [spans[x].astype(np.int64).reshape(-1, 2) for x in chosen]
        tgt_spans = [own_spans[pairs[x][0]].astype(np.int64).reshape(-1, 2) for x in chosen]
        result = align_logprobs([own_texts[pairs[x][0]] for x in chosen], src_spans,
                                [logps[x].astype(np.float64) for x in chosen], tgt_spans,
                                src_special=[sp[:, 0] < 0 for sp in src_spans])
        for c, x in enumerate(chosen):
            i, j = pairs[x]
            units = result.target_units[c]  # [m] unit of each own token, -1: special (the EOS)
            m = min(len(units), width)
            values[i, j, :m] = torch.from_numpy(np.asarray(result.values[c][:m], dtype=np.float32))
            valid[i, j, :m] = torch.from_numpy(units[:m] >= 0)
            units_of[i, j, :m] = torch.from_numpy(comparison_groups(result.target_comparison_units[c],
                                                                    result.target_copied[c])[:m])
            ends = src_spans[c]
            if own_finished[i] and texts["finished"][x] and len(ends) and ends[-1, 0] < 0 and 0 < len(units) <= width \
                    and units[-1] < 0:  # both ended: the judge's EOS log-prob on the learner's EOS
                values[i, j, len(units) - 1] = float(logps[x][-1])
                valid[i, j, len(units) - 1] = True
            matched[i, j] = True
    return AlignedJudgements(values, valid, matched, units_of)


def judged_text_logps(judgements: dict[str, pa.Table], judges: Sequence[str], rollouts: StepRollouts,
                      texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each judge's log-probability of each own row's text over every tokenization (its records' ``advantage`` with
    text marginals): float32 ``[B, M-1]`` and bool ``[B, M-1]`` (a judgement of the row's text, with one)."""
    n = len(texts)
    values = torch.zeros((n, len(judges)), dtype=torch.float32)
    found = torch.zeros((n, len(judges)), dtype=torch.bool)
    pairs, sources = judgement_sources(judgements, judges, rollouts, n)
    columns = peer_rows(judgements, sources, ("response_text", "advantage"))
    for x, (i, j) in enumerate(pairs):
        value = columns["advantage"][x]
        if columns["response_text"][x] == texts[i] and value is not None and np.isfinite(value):
            values[i, j], found[i, j] = float(value), True
    return values, found


def own_logps(trainer: TrainerView, output: GRPOBatch) -> torch.Tensor:
    """The learner's log-probs of its own tokens at generation ``[B, C]``: TRL's ``old_per_token_logps`` where it
    computed them, else one no-grad scoring pass (not put into the batch: TRL's loss then reads its own forward, as
    without a regime)."""
    old = output.get("old_per_token_logps")
    if old is not None:
        return old.detach()
    with torch.no_grad():
        return trainer.score_completions(trainer.model, output["prompt_ids"], output["prompt_mask"],
                                         output["completion_ids"], output["completion_mask"]).detach()


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    """``call()`` and its wall time in seconds."""
    clock = time.perf_counter()
    result = call()
    return result, time.perf_counter() - clock

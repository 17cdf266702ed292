"""A policy's exact next-byte distributions over a text (:mod:`~mutualrl.regimes.core.byte_covers`) from its model:
the forwards of the cover enumeration after the policy's prompt, the judge's (no gradient, its most likely symbols
per byte offset) and the learner's (with the gradient of every state's log-probs), and where each byte offset's
divergence sits on the learner's tokens.

Cost: the enumerations of a batch's texts run side by side, each round's sequences of every text in one padded
forward: the given tokenizations first, then per byte offset the states kept that no earlier forward holds (a
tokenization other than the given one with mass above the floor), each continued to the text's end; on the learner's
side, then, one forward with a gradient over the fewest sequences that hold every state kept
(benchmarks/README.md, byte-kd). Under ZeRO-3 (or DDP syncing buffers) with several ranks, each call of the model
runs in step across the policy's ranks (:mod:`~mutualrl.regimes.core.rank_forwards`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from mutualrl.regimes.core.byte_covers import (Covers, Forward, RowsForward, TokenPieces, cover_next_byte_logps,
                                               find_covers_together)
from mutualrl.regimes.core.cover_spec import CoverSettings
from mutualrl.regimes.core.rank_forwards import forwards_in_step, missing_calls, zero_with_gradient
from mutualrl.regimes.core.trainer_interface import TrainerView


@dataclass(frozen=True)
class CoverLimits:
    """The enumeration's approximations (``floor`` 0 and ``max_states`` 0: exact)."""

    floor: float = 0.0
    max_states: int = 0

    @classmethod
    def of(cls, settings: CoverSettings) -> CoverLimits:
        """A regime's ``cover_floor`` and ``max_covers``."""
        return cls(settings.cover_floor, settings.max_covers)


LOGITS_PER_CALL = 1 << 25
"""A cover forward holds at most this many logits at once (128 MiB of float32; one sequence, however long, always
goes): the sequences of a round, of every text, are cut into calls of this size, shortest first."""

Request = tuple[int, tuple[int, ...]]
"""``(row, sequence)``: a token sequence after prompt ``row``."""

Wrap = Callable[[Callable], Callable]
"""What each call of the model goes through (:func:`~mutualrl.regimes.core.rank_forwards.forwards_in_step`'s
wrapper, announcing it to the policy's other ranks; the identity by default)."""


def _same(call: Callable) -> Callable:
    return call


def rows_forward(trainer: TrainerView, model: torch.nn.Module, prompt_ids: torch.Tensor,
                 prompt_mask: torch.Tensor, wrap: Wrap = _same) -> RowsForward:
    """The enumeration's ``forward`` for ``model`` after several prompts (``prompt_ids``, ``prompt_mask`` ``[N, P]``,
    TRL's left padding): each ``(row, sequence)``'s log-probs after every prefix of it, ``[len + 1, V]``, from
    :func:`_call_logits`' batches."""

    def forward(requests: list[Request]) -> list[torch.Tensor]:
        out: list[torch.Tensor] = [torch.empty(0)] * len(requests)
        for chunk, logits in _call_logits(trainer, model, prompt_ids, prompt_mask, requests, wrap):
            logps = torch.log_softmax(logits.float(), dim=-1)  # [N, W, V]
            for n, r in enumerate(chunk):
                out[r] = logps[n, :len(requests[r][1]) + 1]  # [len + 1, V]
        return out

    return forward


def picked_logps(trainer: TrainerView, model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                 requests: list[Request], picks: list[tuple[int, int]]) -> torch.Tensor:
    """``[len(picks), V]``: for each ``(request, position)`` of ``picks``, the log-probs after the request's first
    ``position`` tokens, from :func:`_call_logits`' batches; one gather per batch and the softmax over those rows
    alone (with a gradient, its backward is one scatter per batch, not one full-size zero tensor per row)."""
    of_request: dict[int, list[int]] = {}
    for p, (r, _) in enumerate(picks):
        of_request.setdefault(r, []).append(p)
    parts, order = [], []
    for chunk, logits in _call_logits(trainer, model, prompt_ids, prompt_mask, requests):
        rows, positions = [], []
        for n, r in enumerate(chunk):
            for p in of_request.get(r, []):
                rows.append(n)
                positions.append(picks[p][1])
                order.append(p)
        index = (torch.tensor(rows, device=logits.device), torch.tensor(positions, device=logits.device))
        parts.append(torch.log_softmax(logits[index].float(), dim=-1))  # [k, V]
    picked = torch.cat(parts)  # [len(picks), V] in the batches' order
    inverse = torch.empty(len(order), dtype=torch.long, device=picked.device)
    inverse[torch.tensor(order, device=picked.device)] = torch.arange(len(order), device=picked.device)  # [len(picks)]
    return picked[inverse]  # [len(picks), V]


def _chunks(requests: list[Request], width: int) -> list[list[int]]:
    """The requests' indices, shortest first, cut into calls of at most :data:`LOGITS_PER_CALL` logits."""
    order = sorted(range(len(requests)), key=lambda r: len(requests[r][1]))
    chunks, start = [], 0
    while start < len(order):
        stop = start + 1
        while stop < len(order) and (stop + 1 - start) * (len(requests[order[stop]][1]) + 1) * width <= LOGITS_PER_CALL:
            stop += 1
        chunks.append(order[start:stop])
        start = stop
    return chunks


def _call_logits(trainer: TrainerView, model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                 requests: list[Request], wrap: Wrap = _same) -> Iterator[tuple[list[int], torch.Tensor]]:
    """The requests right-padded after their prompts into batches of at most :data:`LOGITS_PER_CALL` logits,
    shortest first (less padding), each sequence with one more token so that the logits after its last token are
    kept: per batch, its request indices and TRL's ``completion_logits`` (at its temperature) ``[N, W, V]``; the
    gradient as the caller's mode has it."""
    pad = trainer.processing_class.pad_token_id or 0
    device = prompt_ids.device
    call = wrap(trainer.completion_logits)
    for chunk in _chunks(requests, logits_width(model)):
        columns = len(requests[chunk[-1]][1]) + 1
        ids = torch.full((len(chunk), columns), pad, dtype=torch.long, device=device)  # [N, W]
        mask = torch.zeros((len(chunk), columns), dtype=torch.long, device=device)  # [N, W]
        for n, r in enumerate(chunk):
            sequence = requests[r][1]
            ids[n, :len(sequence)] = torch.tensor(sequence, dtype=torch.long)
            mask[n, :len(sequence) + 1] = 1
        rows = torch.tensor([requests[r][0] for r in chunk], dtype=torch.long, device=device)  # [N]
        yield chunk, call(model, prompt_ids[rows], prompt_mask[rows], ids, mask)  # [N, W, V]


def model_forward(trainer: TrainerView, model: torch.nn.Module, prompt_ids: torch.Tensor,
                  prompt_mask: torch.Tensor, wrap: Wrap = _same) -> Forward:
    """The enumeration's ``forward`` for ``model`` after one prompt (``prompt_ids``, ``prompt_mask`` ``[P]``): the
    sequences as :func:`rows_forward` batches them."""
    forward = rows_forward(trainer, model, prompt_ids[None], prompt_mask[None], wrap)
    return lambda sequences: forward([(0, sequence) for sequence in sequences])


def all_covers(trainer: TrainerView, model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
               texts: Sequence[bytes], given: Sequence[Sequence[int]], pieces: TokenPieces,
               limits: CoverLimits) -> Iterator[tuple[int, Covers]]:
    """Each text's index and covers under ``model`` after its prompt (``prompt_ids`` / ``prompt_mask`` ``[N, P]``),
    the texts' enumerations side by side (:func:`~mutualrl.regimes.core.byte_covers.find_covers_together`) in groups
    of consecutive texts whose given tokenizations' log-probs fit :data:`LOGITS_PER_CALL` together (one text at
    least), a group's covers yielded before the next group's enumeration starts (a caller that drops them holds one
    group's forwards at a time). Every call of the model runs in step with the policy's other ranks where its
    forwards are collective: every rank must run this to its end, with no texts too."""
    width = logits_width(model)
    groups: list[list[int]] = []
    size = 0
    for i, tokens in enumerate(given):
        need = (len(tokens) + 1) * width
        if not groups or size + need > LOGITS_PER_CALL:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += need
    with forwards_in_step(trainer, model) as in_step:  # every rank: the number of forwards depends on its texts
        for group in groups:
            index = torch.tensor(group, dtype=torch.long, device=prompt_ids.device)  # [n]
            forward = rows_forward(trainer, model, prompt_ids[index], prompt_mask[index], in_step)
            yield from zip(group, find_covers_together([texts[i] for i in group], pieces, forward,
                                                       [given[i] for i in group], limits.floor, limits.max_states))


def judge_next_bytes(trainer: TrainerView, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                     texts: Sequence[bytes], given: Sequence[Sequence[int]], k: int,
                     limits: CoverLimits) -> tuple[list[torch.Tensor], list[torch.Tensor], float]:
    """The judge's exact next-byte distribution at every byte offset of each text (``prompt_ids`` / ``prompt_mask``
    ``[N, P]`` its prompt of each, ``given`` its tokens of each, EOS left out): per text its ``k`` most likely
    symbols and their log-masses ``[n + 1, k]`` each (int32, float32), and the largest share of mass dropped. The
    texts' enumerations run side by side (:func:`all_covers`)."""
    from mutualrl.regimes.core.next_bytes import SYMBOLS

    width = logits_width(trainer.model)
    pieces = token_pieces(trainer, width)
    ids_out, logps_out, dropped = [], [], 0.0
    with torch.no_grad():
        for i, covers in all_covers(trainer, trainer.model, prompt_ids, prompt_mask, texts, given, pieces, limits):
            logq = cover_next_byte_logps(covers, texts[i], pieces)  # [n + 1, 258]
            values, symbols = torch.topk(logq, k=min(k, SYMBOLS), dim=-1)  # [n + 1, k]
            ids_out.append(symbols.to(torch.int32).cpu())
            logps_out.append(values.clamp(min=torch.finfo(torch.float32).min).float().cpu())
            dropped = max(dropped, covers.dropped)
    return ids_out, logps_out, dropped


def state_rows(covers: Covers) -> tuple[list[tuple[int, ...]], list[tuple[int, int]]]:
    """The fewest token sequences whose prefixes are all the states (the states no other state extends), and where
    each state's next-token log-probs are in their forward: (sequences, ``(sequence, position)`` per state)."""
    extended = {parent for parent in covers.parents if parent >= 0}
    leaves = [s for s in range(len(covers.tokens)) if s not in extended]
    row_of: dict[int, int] = {}
    for row, leaf in enumerate(leaves):
        state = leaf
        while state >= 0 and state not in row_of:  # a state's ancestors are its prefixes
            row_of[state] = row
            state = covers.parents[state]
    return [covers.tokens[leaf] for leaf in leaves], [(row_of[s], len(covers.tokens[s]))
                                                      for s in range(len(covers.tokens))]


def learner_next_bytes(trainer: TrainerView, model: torch.nn.Module, prompt_ids: torch.Tensor,
                       prompt_mask: torch.Tensor, text: bytes, tokens: Sequence[int], pieces: TokenPieces,
                       limits: CoverLimits) -> tuple[torch.Tensor, Covers]:
    """The learner's exact next-byte log-masses ``[n + 1, 258]`` at every byte offset of its text (``tokens``: the
    tokens it sampled, EOS left out), with the gradient of every state's log-probs (``prompt_ids`` / ``prompt_mask``
    ``[P]``): :func:`learner_next_bytes_together` of one text, its padding dropped: for one rank (with several,
    each rank must call it as often as the others, and add the padding :func:`learner_next_bytes_together` returns)."""
    return learner_next_bytes_together(trainer, model, prompt_ids[None], prompt_mask[None], [text], [tokens], pieces,
                                       limits)[0][0]


def learner_next_bytes_together(trainer: TrainerView, model: torch.nn.Module, prompt_ids: torch.Tensor,
                                prompt_mask: torch.Tensor, texts: Sequence[bytes], tokens: Sequence[Sequence[int]],
                                pieces: TokenPieces,
                                limits: CoverLimits) -> tuple[list[tuple[torch.Tensor, Covers]], torch.Tensor | None]:
    """The learner's exact next-byte log-masses ``[n + 1, 258]`` at every byte offset of each text (``prompt_ids`` /
    ``prompt_mask`` ``[N, P]`` its prompt of each; ``tokens``: the tokens it sampled, EOS left out), with the gradient
    of every state's log-probs: the states found with no gradient (the texts side by side), then the forwards with
    the gradient over the fewest sequences that hold every state (:func:`state_rows`), all texts' together. Also an
    exact 0 to add to the loss (None where nothing pads): where the forwards are collective, this rank's gradient
    calls are padded to the count of the policy's rank with the most, each pad a forward whose backward gathers the
    parameters as a real call's does."""
    with torch.no_grad():
        found = [covers for _, covers in all_covers(trainer, model, prompt_ids, prompt_mask, texts, tokens, pieces,
                                                    limits)]
    requests: list[Request] = []
    picks: list[tuple[int, int]] = []
    for i, covers in enumerate(found):
        sequences, at = state_rows(covers)
        picks.extend((len(requests) + row, position) for row, position in at)
        requests.extend((i, sequence) for sequence in sequences)
    idle = missing_calls(trainer.accelerator, model, len(_chunks(requests, logits_width(model))))  # before any call
    state_logps = picked_logps(trainer, model, prompt_ids, prompt_mask, requests, picks)  # [Σ S, V]
    pads = [zero_with_gradient(trainer, model) for _ in range(idle)]  # each an exact 0 with a backward
    each = torch.split(state_logps, [len(covers.tokens) for covers in found])  # [S, V] per text
    return [(cover_next_byte_logps(covers, text, pieces, states), covers)
            for text, covers, states in zip(texts, found, each, strict=True)], (sum(pads[1:], pads[0]) if pads else None)


def text_logps(trainer: TrainerView, model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
               texts: Sequence[bytes], given: Sequence[Sequence[int]], finished: Sequence[bool],
               limits: CoverLimits) -> tuple[torch.Tensor, float]:
    """float32 ``[N]``: each text's log-probability under ``model`` after its prompt (``prompt_ids`` / ``prompt_mask``
    ``[N, P]``), summed over every tokenization the ``limits`` keep
    (:func:`~mutualrl.regimes.core.byte_covers.text_logp`; ``given``: a tokenization of each, EOS left out; its EOS
    counted where ``finished``; exact with both limits 0); and the largest share of an offset's mass they dropped. No
    gradient."""
    from mutualrl.regimes.core.byte_covers import text_logp

    width = logits_width(model)
    pieces = token_pieces(trainer, width)
    out = torch.zeros(len(texts), dtype=torch.float32)
    dropped = 0.0
    with torch.no_grad():
        for row, covers in all_covers(trainer, model, prompt_ids, prompt_mask, texts, given, pieces, limits):
            out[row] = float(text_logp(covers, texts[row], pieces, bool(finished[row])))
            dropped = max(dropped, covers.dropped)
    return out, dropped


@dataclass
class OwnTexts:
    """This rank's rows as the learner wrote them: ``tokens`` (EOS left out), ``texts`` their bytes, ``finished``."""

    tokens: list[list[int]]
    texts: list[bytes]
    finished: list[bool]


def own_texts(trainer: TrainerView, completion_ids: torch.Tensor, mask: torch.Tensor, pieces: TokenPieces) -> OwnTexts:
    """The rows ``completion_ids`` ``[B, C]`` (``mask``) as text tokens and bytes, a trailing stop token removed."""
    stops = set(int(v) for v in trainer.eos_token_ids)
    tokens, texts, finished = [], [], []
    for row, keep in zip(completion_ids.tolist(), mask.bool().tolist(), strict=True):
        ids = [v for v, kept in zip(row, keep, strict=True) if kept]
        done = bool(ids) and ids[-1] in stops
        ids = ids[:-1] if done else ids
        tokens.append(ids)
        texts.append(pieces.text_of(ids))
        finished.append(done)
    return OwnTexts(tokens, texts, finished)


def logits_width(model: torch.nn.Module) -> int:
    """How many logits ``model`` gives per position: its (text) config's vocabulary size (a sharded output layer may
    hold none of its rows on this rank)."""
    config = getattr(model, "module", model).config  # a DeepSpeed engine's own ``config`` is DeepSpeed's dict
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(text.vocab_size)


_PIECES: dict[tuple[int, int], TokenPieces] = {}


def token_pieces(trainer: TrainerView, width: int) -> TokenPieces:
    """The bytes of the trainer's vocabulary for logits ``width`` wide (built once per tokenizer and width)."""
    tokenizer = trainer.processing_class
    key = (id(tokenizer), width)
    if key not in _PIECES:
        _PIECES[key] = TokenPieces.from_tokenizer(tokenizer, width, trainer.eos_token_ids)
    return _PIECES[key]


def offset_slots(tokens: Sequence[int], pieces: TokenPieces, finished: bool) -> torch.Tensor:
    """int64 ``[n + 1]``: the token slot each byte offset's divergence sits on, for a learner row whose text tokens
    are ``tokens`` (EOS left out): the token that writes the byte after the offset; the text's end on its EOS
    (slot ``len(tokens)``) where it ``finished``, else on its last token."""
    slots: list[int] = []
    for slot, v in enumerate(tokens):
        slots.extend([slot] * len(pieces.pieces[int(v)]))
    slots.append(len(tokens) if finished else max(len(tokens) - 1, 0))
    return torch.tensor(slots, dtype=torch.long)

"""A policy's exact next-byte distributions over a text (:mod:`~mutualrl.regimes.core.byte_covers`) from its model:
the forwards of the cover enumeration after the policy's prompt, the judge's (no gradient, its most likely symbols
per byte offset) and the learner's (with the gradient of every state's log-probs), and where each byte offset's
divergence sits on the learner's tokens.

Cost: one forward of the given tokenization, plus one per distinct branch the enumeration keeps (a tokenization
other than the given one with mass above the floor), then, on the learner's side, one forward with a gradient over
those branches (benchmarks/README.md, byte-kd).
Under ZeRO-3 with several ranks the enumeration's forwards run in step across the policy's ranks
(:mod:`~mutualrl.regimes.core.rank_forwards`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mutualrl.regimes.core.byte_covers import Covers, Forward, TokenPieces, cover_next_byte_logps, find_covers
from mutualrl.regimes.core.rank_forwards import forwards_in_step
from mutualrl.regimes.core.trainer_interface import TrainerView


@dataclass(frozen=True)
class CoverLimits:
    """The enumeration's approximations (``floor`` 0 and ``max_states`` 0: exact)."""

    floor: float = 0.0
    max_states: int = 0


def model_forward(trainer: TrainerView, model: torch.nn.Module, prompt_ids: torch.Tensor,
                  prompt_mask: torch.Tensor) -> Forward:
    """The enumeration's ``forward`` for ``model`` after one prompt (``prompt_ids``, ``prompt_mask`` ``[P]``, TRL's
    left padding): the sequences right-padded into one batch, each with one more token so that the logits after its
    last token are kept (TRL's ``completion_logits``, at its temperature); the gradient as the caller's mode has it."""
    pad = trainer.processing_class.pad_token_id or 0

    def forward(sequences: list[tuple[int, ...]]) -> list[torch.Tensor]:
        width = max(len(s) for s in sequences) + 1
        ids = torch.full((len(sequences), width), pad, dtype=torch.long, device=prompt_ids.device)  # [N, W]
        mask = torch.zeros((len(sequences), width), dtype=torch.long, device=prompt_ids.device)  # [N, W]
        for row, sequence in enumerate(sequences):
            ids[row, :len(sequence)] = torch.tensor(sequence, dtype=torch.long)
            mask[row, :len(sequence) + 1] = 1
        logits = trainer.completion_logits(model, prompt_ids[None].expand(len(sequences), -1),
                                           prompt_mask[None].expand(len(sequences), -1), ids, mask)  # [N, W, V]
        logps = torch.log_softmax(logits.float(), dim=-1)  # [N, W, V]
        return [logps[row, :len(sequence) + 1] for row, sequence in enumerate(sequences)]

    return forward


def judge_next_bytes(trainer: TrainerView, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                     texts: Sequence[bytes], given: Sequence[Sequence[int]], k: int,
                     limits: CoverLimits) -> tuple[list[torch.Tensor], list[torch.Tensor], float]:
    """The judge's exact next-byte distribution at every byte offset of each text (``prompt_ids`` / ``prompt_mask``
    ``[N, P]`` its prompt of each, ``given`` its tokens of each, EOS left out): per text its ``k`` most likely
    symbols and their log-masses ``[n + 1, k]`` each (int32, float32), and the largest share of mass dropped."""
    from mutualrl.regimes.core.next_bytes import SYMBOLS

    width = logits_width(trainer.model)
    pieces = token_pieces(trainer, width)
    ids_out, logps_out, dropped = [], [], 0.0
    with torch.no_grad(), forwards_in_step(trainer, trainer.model) as in_step:
        for row, (text, tokens) in enumerate(zip(texts, given, strict=True)):
            forward = in_step(model_forward(trainer, trainer.model, prompt_ids[row], prompt_mask[row]))
            covers = find_covers(text, pieces, forward, tokens, limits.floor, limits.max_states)
            logq = cover_next_byte_logps(covers, text, pieces)  # [n + 1, 258]
            values, symbols = torch.topk(logq, k=min(k, SYMBOLS), dim=-1)  # [n + 1, k]
            ids_out.append(symbols.to(torch.int32).cpu())
            logps_out.append(values.clamp(min=torch.finfo(torch.float32).min).float().cpu())
            dropped = max(dropped, covers.dropped)
    return ids_out, logps_out, dropped


def learner_next_bytes(trainer: TrainerView, model: torch.nn.Module, prompt_ids: torch.Tensor,
                       prompt_mask: torch.Tensor, text: bytes, tokens: Sequence[int], pieces: TokenPieces,
                       limits: CoverLimits) -> tuple[torch.Tensor, Covers]:
    """The learner's exact next-byte log-masses ``[n + 1, 258]`` at every byte offset of its text (``tokens``: the
    tokens it sampled, EOS left out), with the gradient of every state's log-probs: the states found with no
    gradient, then one forward with the gradient over their branches."""
    with torch.no_grad(), forwards_in_step(trainer, model) as in_step:
        covers = find_covers(text, pieces, in_step(model_forward(trainer, model, prompt_ids, prompt_mask)), tokens,
                             limits.floor, limits.max_states)
    rows = model_forward(trainer, model, prompt_ids, prompt_mask)(covers.branches)  # each [len + 1, V]
    state_logps = torch.stack([rows[branch][position] for branch, position in covers.at])  # [S, V]
    return cover_next_byte_logps(covers, text, pieces, state_logps), covers


TEXT_LIMITS = CoverLimits(1e-4, 8)
"""The enumeration's limits for a text's probability over its tokenizations (OPD's ``signal: sequence``): byte-kd's
defaults (a tokenization below 1e-4 of its offset's most likely one dropped, at most 8 per offset)."""


def text_logps(trainer: TrainerView, model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
               texts: Sequence[bytes], given: Sequence[Sequence[int]], finished: Sequence[bool],
               limits: CoverLimits = TEXT_LIMITS) -> torch.Tensor:
    """float32 ``[N]``: each text's log-probability under ``model`` after its prompt (``prompt_ids`` / ``prompt_mask``
    ``[N, P]``), summed over every tokenization (:func:`~mutualrl.regimes.core.byte_covers.text_logp`; ``given``: a
    tokenization of each, EOS left out; its EOS counted where ``finished``); no gradient."""
    from mutualrl.regimes.core.byte_covers import text_logp

    width = logits_width(model)
    pieces = token_pieces(trainer, width)
    out = torch.zeros(len(texts), dtype=torch.float32)
    with torch.no_grad(), forwards_in_step(trainer, model) as in_step:
        for row, (text, tokens, done) in enumerate(zip(texts, given, finished, strict=True)):
            forward = in_step(model_forward(trainer, model, prompt_ids[row], prompt_mask[row]))
            covers = find_covers(text, pieces, forward, tokens, limits.floor, limits.max_states)
            out[row] = float(text_logp(covers, text, pieces, bool(done)))
    return out


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
    hold none of its rows on this rank). A DeepSpeed engine (or DDP) wrapping the model: its module's config."""
    config = getattr(model, "module", model).config  # the engine's own ``config`` is DeepSpeed's
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

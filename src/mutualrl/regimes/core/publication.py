"""What a policy publishes each step: this rank's rollout records for the SEE, built from TRL's batch.

The record (:class:`~mutualrl.see.records.RolloutBatch`) takes the token ids and behaviour log-probs straight from
TRL's padded tensors (no Python list per token), the text through THL (the one decode of ours) and each token's span
only where the regime's readers need spans (PRP's peer denominator). A regime does not call this: it declares what its
readers need (``RegimeAdapter.publishes_traces``, ``publishes_spans``, ``text_byte_limits``) and the base adapter
publishes (:meth:`~mutualrl.regimes.core.adapter.RegimeAdapter.publish_records`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mutualrl.regimes.core.rank_metrics import Quantile
from mutualrl.regimes.core.trainer_interface import GRPOBatch, StepRollouts, TrainerView

if TYPE_CHECKING:
    from mutualrl.regimes.core.cover_scoring import CoverLimits
    from mutualrl.see.records import RolloutBatch


def rollout_records(output: GRPOBatch, rollouts: StepRollouts, trainer: TrainerView, traces: bool,
                    spans: bool, text_byte_limits: CoverLimits | None = None) -> RolloutBatch:
    """This rank's records of the step: with the behaviour traces (``traces``), each token's character span
    (``spans``) and each byte's log-prob given the text before (under the limits ``text_byte_limits``,
    :func:`text_byte_records`) where a reader needs them. Built from the trainer's own tensors, so not re-checked."""
    from mutualrl.see.records import Ragged, RolloutBatch
    from mutualrl.thl import batch_decode_text, batch_decode_with_spans

    lengths = rollouts.lengths_local  # int64 [B]
    rows = len(lengths)
    tokens = Ragged.from_padded(output["completion_ids"], lengths, np.int32)  # TRL's rows: right-padded
    logps = behaviour_trace(output) if traces else None  # [B, C]
    token_spans = None
    if spans:
        decoded = batch_decode_with_spans(trainer.processing_class, tokens)
        texts, token_spans = [d.text for d in decoded], [d.spans for d in decoded]
    else:
        texts = batch_decode_text(trainer.processing_class, tokens)
    last = tokens.values[np.maximum(tokens.offsets[1:] - 1, 0)] if len(tokens.values) else np.zeros(rows, np.int32)
    return RolloutBatch(
        prompt_id=rollouts.prompt_ids_local,
        sample_index=rollouts.sample_index_local,
        prompt_text=[_prompt_text(p) for p in rollouts.prompt_texts_local],
        response_text=texts,
        response_token_ids=tokens,
        response_token_spans=token_spans,
        reward=rollouts.rewards_local.float().numpy(),
        advantage=output["advantages"].float().cpu().numpy(),
        # one per token, by the rows' lengths: mask_truncated_completions zeroes a cut row's completion_mask
        behaviour_logps=None if logps is None else Ragged.from_padded(logps, lengths, np.float32),
        finished=(lengths > 0) & np.isin(last, trainer.eos_token_ids),  # [B] the last token is an EOS
        text_byte_logps=(None if text_byte_limits is None
                         else text_byte_records(output, lengths, texts, trainer, text_byte_limits)),
    )


def text_byte_records(output: GRPOBatch, lengths: Any, texts: list[str], trainer: TrainerView,
                      limits: CoverLimits) -> list[Any]:
    """Per row, the policy's log-prob of each byte of its text given the bytes before, then of its end where it
    finished, over every tokenization (:mod:`~mutualrl.regimes.core.written_bytes`; no gradient): what a reader
    compares texts on whichever way this policy split them: of the decoded text (the record's), its sampled tokens
    forwarded first where they write it; the enumeration under ``limits``, the largest share of an offset's mass they
    dropped logged as ``mutual/text_bytes_cover_dropped``. None for a row whose text the limits could not write."""
    from mutualrl.regimes.core.cover_scoring import logits_width, own_texts, token_pieces
    from mutualrl.regimes.core.written_bytes import policy_byte_logps, published_byte_logps

    ids = output["completion_ids"]  # [B, C]
    mask = torch.arange(ids.shape[1])[None, :] < torch.as_tensor(lengths)[:, None]  # bool [B, C]
    own = own_texts(trainer, ids.cpu(), mask, token_pieces(trainer, logits_width(trainer.model)))
    written = [text.encode("utf-8") for text in texts]
    given = [tokens if own.texts[i] == written[i] else [] for i, tokens in enumerate(own.tokens)]
    values, dropped = policy_byte_logps(trainer, output["prompt_ids"], output["prompt_mask"], range(len(texts)),
                                        given, own.finished, written, limits=limits)
    trainer.record_metrics({"mutual/text_bytes_cover_dropped": Quantile.largest(dropped)})
    return [published_byte_logps(values.get(i)) for i in range(len(texts))]


def behaviour_trace(output: GRPOBatch) -> torch.Tensor | None:
    """The log-probs ``[B, C]`` this policy sampled its completions with, which a peer's importance weight divides by:
    the engine's own under vLLM (TRL's ``sampling_per_token_logps``, the distribution the tokens were drawn from,
    sampler-trainer mismatch included), else the trainer's (TRL's ``old_per_token_logps``: transformers generation
    samples from the same model, so the two are one distribution)."""
    sampling, trainer_logps = output.get("sampling_per_token_logps"), output.get("old_per_token_logps")
    if sampling is None or trainer_logps is None:
        return trainer_logps if sampling is None else sampling
    return torch.where(torch.isnan(sampling), trainer_logps, sampling)  # [B, C] a token vLLM left unscored: the trainer's


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        return str(prompt[-1].get("content", ""))
    return str(prompt)

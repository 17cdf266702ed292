"""THL: the Tokenizer Heterogeneity Layer (paper Sec. "Tokenizer Heterogeneity Layer").

Heterogeneous policies exchange response text and log-prob traces across incompatible
vocabularies:

- :func:`decode_with_spans` / :func:`batch_decode_with_spans`: the text of the tokens a
  policy generated and each token's character span (published where a regime's readers
  need spans); :func:`batch_decode_text`: the same text alone (every other rollout);
- :func:`retokenize`: a peer response text -> learner token ids (continuation of the
  learner's prompt; ``regimes.core.peers.learner_responses`` builds TRL's rows from it);
- :func:`align_logprobs`: the paper's word rule from character spans, vectorised, with
  exact per-unit conservation and the residual ``R_THL`` reported;
- :mod:`.metrics` / :mod:`.check`: the paper's THL diagnostics (``mutualrl thl-check``).
"""

from mutualrl.thl.align import ALIGN_RULES, AlignedTraces, align_logprobs
from mutualrl.thl.metrics import ConservationStats, conservation_stats, ratio_stats, relative_mae, word_mass
from mutualrl.thl.retokenize import Retokenized, retokenize
from mutualrl.thl.spans import DecodedText, batch_decode_text, batch_decode_with_spans, byte_table, decode_with_spans
from mutualrl.thl.units import UNIT_MODES, BatchPartition, Partition, partition, partition_batch

__all__ = [
    "ALIGN_RULES",
    "UNIT_MODES",
    "AlignedTraces",
    "BatchPartition",
    "ConservationStats",
    "DecodedText",
    "Partition",
    "Retokenized",
    "align_logprobs",
    "batch_decode_text",
    "batch_decode_with_spans",
    "byte_table",
    "conservation_stats",
    "decode_with_spans",
    "partition",
    "partition_batch",
    "ratio_stats",
    "relative_mae",
    "retokenize",
    "word_mass",
]

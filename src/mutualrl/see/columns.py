"""The SEE record layout: one row per rollout, its columns and version (the schema every shard has).

The paper's SEE record is ``D = (id, x_text, y_text, r, A, l^(m), meta)`` (Sec. "The Mutual
RL System Design", "Dataflow in One Training Loop", SEE paragraph): raw prompt and response
texts, the verifier reward, an optional advantage, the behaviour-policy per-token trace and
provenance. We add what the Tokenizer Heterogeneity Layer needs to align traces across
vocabularies: the token ids the policy actually generated and each token's character span
in the response text.

One row per rollout. Columns (:data:`ROLLOUT_SCHEMA`):

=========================  ==================  ==================================================
column                     type                meaning
=========================  ==================  ==================================================
step                       int64               trainer step that produced the rollout
policy                     string              policy name (publisher)
rank                       int32               publishing rank within the policy's process group
prompt_id                  string              stable prompt id (identical across policies)
sample_index               int32               0..K-1 within the prompt's GRPO group
prompt_text                string              raw prompt text (shared by all policies)
response_text              string              decoded response text
response_token_ids         list<int32>         generated token ids, EOS included if emitted
response_token_spans       list<int32>         flattened ``[s0, e0, s1, e1, ...]``: token i covers
                                               ``response_text[s_i:e_i]`` (Python code-point
                                               indices); ``-1, -1`` for tokens with no text
reward                     float32             the reward, finite; NaN: not scored (every reward
                                               function returned None: TRL's NaN)
advantage                  float32, nullable   advantage, finite when present
behaviour_logps            list<float32>,      per-token log-probs of the behaviour policy,
                           nullable            finite; null when not published
finished                   bool                the response ended with EOS
num_tokens                 int32               ``len(response_token_ids)``
=========================  ==================  ==================================================

Variable-length columns are Arrow lists (32-bit offsets) over flat primitive buffers, so a
reader maps them from disk and sees numpy arrays without copying (:func:`ragged`).
"""


from __future__ import annotations

import pyarrow as pa

#: Version of the record layout; written into every shard's metadata and manifest.
SCHEMA_VERSION = 1

ROLLOUT_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("policy", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("sample_index", pa.int32(), nullable=False),
        pa.field("prompt_text", pa.string(), nullable=False),
        pa.field("response_text", pa.string(), nullable=False),
        pa.field("response_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("response_token_spans", pa.list_(pa.int32()), nullable=False),
        pa.field("reward", pa.float32(), nullable=False),
        pa.field("advantage", pa.float32(), nullable=True),
        pa.field("behaviour_logps", pa.list_(pa.float32()), nullable=True),
        pa.field("finished", pa.bool_(), nullable=False),
        pa.field("num_tokens", pa.int32(), nullable=False),
    ]
)

COLUMNS: tuple[str, ...] = tuple(ROLLOUT_SCHEMA.names)

#: Columns stamped by the exchange at publish time (a batch may be built without them).
ID_COLUMNS = ("step", "policy", "rank")

"""SEE: the Shared Experience Exchange (paper Sec. "The Mutual RL System Design").

A file-backed store of typed rollout records with provenance. Each policy process
publishes its rollouts at every step and reads its peers' records for the same step:

    from mutualrl.see import ExperienceExchange, RolloutBatch

    see = ExperienceExchange(run_dir / "see", run_id, policy="qwen", rank=0, world_size=1,
                             policies=["qwen", "llama"])
    see.publish(step, RolloutBatch(...))
    peers = see.gather(step, columns=["prompt_id", "reward"], policies=see.peers)

See ``docs/see.md`` for the on-disk layout and guarantees.
"""

from mutualrl.see.errors import (
    CorruptShardError,
    InvalidRecordError,
    PeerFailedError,
    PeerTimeoutError,
    SchemaMismatchError,
    SEEPeerError,
    ShardMissingError,
)
from mutualrl.see.exchange import ExperienceExchange
from mutualrl.see.liveness import clear_failure, mark_policy_failed, read_failure
from mutualrl.see.shards import ShardInfo, load_shard
from mutualrl.see.provenance import collect_provenance
from mutualrl.see.records import (
    COLUMNS,
    ROLLOUT_SCHEMA,
    SCHEMA_VERSION,
    Ragged,
    RolloutBatch,
    ragged,
    validate_table,
)

__all__ = [
    "COLUMNS",
    "ROLLOUT_SCHEMA",
    "SCHEMA_VERSION",
    "CorruptShardError",
    "ExperienceExchange",
    "InvalidRecordError",
    "PeerFailedError",
    "PeerTimeoutError",
    "Ragged",
    "RolloutBatch",
    "SEEPeerError",
    "SchemaMismatchError",
    "ShardInfo",
    "ShardMissingError",
    "clear_failure",
    "collect_provenance",
    "load_shard",
    "mark_policy_failed",
    "ragged",
    "read_failure",
    "validate_table",
]

"""The report of ``mutualrl see inspect``: what an inspection found, and how it prints as JSON.

``exchange_inspect.py`` walks the exchange and runs the checks; this module is what they fill in: the issues, the files, one
cell per policy and step, the summaries, and the provenance summary gathered from the manifests.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from mutualrl.see.shards import ShardInfo


@dataclass
class Issue:
    """One inconsistency. ``kind`` is a stable identifier (e.g. ``checksum``, ``stray_temp``)."""

    kind: str
    message: str
    path: str | None = None
    step: int | None = None
    policy: str | None = None
    rank: int | None = None


@dataclass
class FileEntry:
    path: str  # relative to the exchange root
    bytes: int
    kind: str  # data | manifest | temp | failure | heartbeat | other


@dataclass
class PolicyStep:
    """What one policy committed at one step."""

    policy: str
    step: int
    world_size: int | None
    ranks: list[int]
    records: int  # rows of the shards that verified
    reward_mean: float | None
    bytes: int
    corrupt_ranks: list[int] = field(default_factory=list)


@dataclass
class InspectReport:
    root: str
    steps: list[int] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    cells: dict[int, dict[str, PolicyStep]] = field(default_factory=dict)
    step_reward_mean: dict[int, float | None] = field(default_factory=dict)
    policy_reward_mean: dict[str, float | None] = field(default_factory=dict)
    overall_reward_mean: float | None = None
    records: int = 0
    files: list[FileEntry] = field(default_factory=list)
    total_bytes: int = 0
    schema_versions: list[int] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    provenance: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    checksums_verified: bool = True
    sources: list[dict[str, Any]] = field(default_factory=list)  # per (learner, peer): peer_offpolicy_stats
    retention: str | None = None  # the steps no longer held and why (ops/exchange_retention.py); None: all held
    judgements: list[dict[str, Any]] = field(default_factory=list)  # per (learner, judge): exchange_inspect_judgements

    @property
    def ok(self) -> bool:
        return not self.issues

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        out["cells"] = {str(s): {p: asdict(c) for p, c in row.items()} for s, row in self.cells.items()}
        out["step_reward_mean"] = {str(s): v for s, v in self.step_reward_mean.items()}
        return out


def mean_or_none(total: float, count: int) -> float | None:
    """``total / count``, or ``None`` when nothing was counted (printed as ``-``)."""
    return total / count if count else None


def merge_provenance(provenance: dict[str, dict[str, Any]], policy: str, info: ShardInfo) -> None:
    """Add one manifest's provenance (model, tokenizer, host, package versions, publish time) to ``policy``'s."""
    entry = provenance.setdefault(
        policy, {"models": set(), "tokenizers": set(), "hostnames": set(), "versions": set(), "first": None, "last": None}
    )
    prov = info.provenance or {}
    entry["models"].add(prov.get("model"))
    entry["tokenizers"].add(prov.get("tokenizer"))
    entry["hostnames"].add(prov.get("hostname"))
    entry["versions"].add(json.dumps(prov.get("versions") or {}, sort_keys=True))
    t = info.published_at
    entry["first"] = t if entry["first"] is None else min(entry["first"], t)
    entry["last"] = t if entry["last"] is None else max(entry["last"], t)


def finish_provenance(entry: dict[str, Any]) -> dict[str, Any]:
    """One policy's merged provenance as the report shows it: sorted lists, and the first and last publish times."""
    def clean(values: set[Any]) -> list[Any]:
        return sorted(v for v in values if v is not None)

    return {
        "models": clean(entry["models"]),
        "tokenizers": clean(entry["tokenizers"]),
        "hostnames": clean(entry["hostnames"]),
        "versions": [json.loads(v) for v in sorted(entry["versions"])],
        "first_published_at": entry["first"],
        "last_published_at": entry["last"],
    }

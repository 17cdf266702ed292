"""The tiny models' recorded digests: is the model this machine built the one the README's figures came from?

``tiny_digests.json`` (beside this module) holds the sha256 of each tiny model's weights as the tested set
(``requirements-tested.txt``) builds them, with the torch and transformers versions and the machine type
they hold for. The set-up (``mutualrl assets fetch``), ``mutualrl doctor`` and the suite compare.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from pathlib import Path

from mutualrl.pools.tiny import (
    TINY_MODELS,
    is_tiny_model_cached,
    read_warm_start_report,
    tiny_model_dir,
    tiny_model_problem,
)
from mutualrl.pools.tiny_warm_start import build_versions, weights_digest

RECORD = Path(__file__).with_name("tiny_digests.json")


@dataclass(frozen=True)
class DigestVerdict:
    """One tiny model against the record: ``same``, ``differs``, ``unchecked`` (another environment), ``missing``,
    or ``damaged`` (a file missing or changed since this machine built it: the cache's doing, not the machine's)."""

    name: str
    status: str
    detail: str


def build_context() -> dict[str, str]:
    """What the recorded digests hold for: the versions that build the bytes and the machine type."""
    return {**build_versions(), "machine": platform.machine()}


def read_record(path: Path = RECORD) -> dict:
    return json.loads(path.read_text())


def verdict(name: str, record: dict | None = None) -> DigestVerdict:
    """How tiny model ``name`` as cached here compares with the recorded digest."""
    record = read_record() if record is None else record
    if not is_tiny_model_cached(name):
        return DigestVerdict(name, "missing", f"{name}: not built yet (mutualrl assets fetch)")
    damaged = tiny_model_problem(name)
    if damaged is not None:
        return DigestVerdict(name, "damaged", f"{name}: {damaged}: delete {tiny_model_dir(name)} and run "
                             f"`mutualrl assets fetch model:{name}` to build it again")
    context = build_context()
    held = record["built_with"]
    if context != held or record["recipe_hash"].get(name) != TINY_MODELS[name].recipe_hash():
        other = ", ".join(f"{k} {context[k]}" for k in held if context.get(k) != held[k]) or "another recipe"
        return DigestVerdict(name, "unchecked", f"{name}: digests are recorded for "
                             f"{', '.join(f'{k} {v}' for k, v in held.items())}; here {other}")
    built = weights_digest(tiny_model_dir(name))
    if built == record["sha256"][name]:
        return DigestVerdict(name, "same", f"{name}: sha256 {built[:12]}, as recorded")
    env = read_warm_start_report(name).get("build_env")
    return DigestVerdict(name, "differs", f"{name}: weights sha256 {built[:12]} differ from the recorded "
                         f"{record['sha256'][name][:12]} (built under {env}): the README's tiny-pool figures and "
                         "the tests tied to its behaviour may not hold on this machine")


def verdicts() -> list[DigestVerdict]:
    record = read_record()
    return [verdict(name, record) for name in TINY_MODELS]

"""Rolling an exchange back to an optimizer step, for a resumed run: what a later step wrote goes; an exchange
another mutualrl version wrote (another record layout) is refused first, before anything is changed."""

from __future__ import annotations

import shutil
from pathlib import Path

from mutualrl.see.consumption_log import rollback_log
from mutualrl.see.errors import CorruptShardError
from mutualrl.see.files import FAILED_DIR, MANIFEST_RE, STEP_DIR_RE, judgements_roots
from mutualrl.see.records import READABLE_SCHEMA_VERSIONS
from mutualrl.see.shards import older_layout_error, read_manifest


def refuse_older_layout(root: Path) -> None:
    """:class:`~mutualrl.see.errors.SchemaMismatchError` (one line: start a new run, or resume with the version
    that wrote it) when a committed shard under ``root`` has a schema version this one cannot read: a resumed run would read the
    rounds before its restart step (bounded staleness, ``see inspect``) and find records it cannot read."""
    if not root.is_dir():
        return
    for nested in judgements_roots(root):  # peers' judgements: an exchange of the same layout
        refuse_older_layout(nested)
    for step in root.iterdir():
        if not (STEP_DIR_RE.match(step.name) and step.is_dir()):
            continue
        for manifest in step.glob("*/*.manifest.json"):
            if not MANIFEST_RE.match(manifest.name):
                continue
            try:
                version = read_manifest(manifest).schema_version
            except (CorruptShardError, FileNotFoundError):  # damaged: the readers report it where they meet it
                continue
            if version not in READABLE_SCHEMA_VERSIONS:
                raise older_layout_error(root, version)


def rollback_exchange(root: Path, step: int) -> int:
    """Remove the step folders from ``step`` on (the exchange of step k feeds optimizer step k + 1), the failure
    markers and the consumption log's later rounds, here and in the nested exchanges of peers' judgements (a resumed
    run must not read a judgement of a rollout it is about to make again); returns how many step folders went (the
    exchange's own)."""
    removed = 0
    if not root.exists():
        return 0
    for nested in judgements_roots(root):
        rollback_exchange(nested, step)
    for child in root.iterdir():
        match = STEP_DIR_RE.match(child.name)
        if match and int(match.group(1)) >= step:
            shutil.rmtree(child)
            removed += 1
    failed = root / FAILED_DIR
    if failed.exists():
        shutil.rmtree(failed)
    rollback_log(root, step)
    return removed

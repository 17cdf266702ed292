"""Rolling an exchange back to an optimizer step, for a resumed run: what a later step wrote goes."""

from __future__ import annotations

import shutil
from pathlib import Path

from mutualrl.see.consumption_log import rollback_log
from mutualrl.see.files import FAILED_DIR, STEP_DIR_RE


def rollback_exchange(root: Path, step: int) -> int:
    """Remove the step folders from ``step`` on (the exchange of step k feeds optimizer step k + 1), the failure
    markers and the consumption log's later rounds; returns how many step folders went."""
    removed = 0
    if not root.exists():
        return 0
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

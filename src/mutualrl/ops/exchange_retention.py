"""What an exchange no longer holds, and why: ``see.retention_steps`` keeps each policy's last N steps.

``mutualrl see inspect`` shows "steps: 17 (43..59)"; without this a reader cannot tell a run that began at step 43
from one whose older steps were deleted as it trained. The run folder's config.yaml says the retention it ran with.
"""

from __future__ import annotations

from pathlib import Path

from mutualrl.run_folder import RunPaths

UNKNOWN = object()


def retention_steps(run: Path | None) -> object:
    """The run's ``see.retention_steps`` (an int, or None: keep all) from its config.yaml; :data:`UNKNOWN` without
    a run folder or a readable config."""
    if run is None or not RunPaths(run).config.is_file():
        return UNKNOWN
    import yaml

    try:
        see = (yaml.safe_load(RunPaths(run).config.read_text(encoding="utf-8")) or {}).get("see") or {}
    except (OSError, ValueError, yaml.YAMLError, AttributeError):
        return UNKNOWN
    value = see.get("retention_steps", UNKNOWN)
    return value if value is None or isinstance(value, int) else UNKNOWN


def retention_note(run: Path | None, steps: list[int]) -> str | None:
    """One phrase saying which steps are gone and why, when the exchange's first step kept is not its first step
    (step 0); None when it holds them all."""
    if not steps or steps[0] == 0:
        return None
    gone = "step 0" if steps[0] == 1 else f"steps 0..{steps[0] - 1}"
    kept = retention_steps(run)
    if isinstance(kept, int):
        return f"{gone} deleted by retention (see.retention_steps={kept}: each policy keeps its last {kept} steps)"
    if kept is None:
        return f"{gone} not here, though the run keeps every step (see.retention_steps=null): deleted by hand?"
    return f"{gone} not here (deleted by retention, see.retention_steps, or never written)"

"""The one reader of a checkpoint's regime state file (``mutualrl-regime-state.json``), torch-free.

The launcher's check of a checkpoint (``ops/checkpoint_files.py``, which ``--resume`` uses to choose the checkpoint)
and the worker that hands the state to its regime (``training/regime_state.py``) read the file with this one
function, so a state the worker would refuse is one the launcher passes over for the checkpoint before it: strict
JSON (no ``NaN``/``Infinity``, no number beyond a float's range), its format and version, the regime and policy it
names, and the regime's own check of its state (:attr:`~mutualrl.regimes.core.regime_spec.RegimeSpec.state_check`:
SGT's counters are whole numbers >= 0, HACPO's window has a float dtype and one finite number or null per policy).
Every refusal is one line naming the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

REGIME_STATE_NAME = "mutualrl-regime-state.json"
REGIME_STATE_FORMAT = "mutualrl-regime-state"
REGIME_STATE_VERSION = 1
MAX_STATE_BYTES = 64 << 20
"""A regime state is a few kilobytes (HACPO's window: a float per policy and step); more is not one."""


class RegimeStateError(ValueError):
    """A regime state file that cannot be resumed from; the message is one line naming the file."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (a state holds finite numbers only)")


def strict_json(text: str) -> Any:
    """``text`` parsed as strict JSON: ``NaN``, ``Infinity`` and a number beyond a float's range are refused."""
    value = json.loads(text, parse_constant=_refuse_constant)
    nonfinite = first_nonfinite(value)
    if nonfinite is not None:
        raise ValueError(f"{nonfinite} is not a finite number (a state holds finite numbers only)")
    return value


def first_nonfinite(value: Any) -> str | None:
    """Where ``value`` holds a float that is not finite (``1e999`` parses as infinity), or None."""
    pending = [("", value)]
    while pending:
        where, item = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"the value at {where or 'the top'!r}"
        if isinstance(item, dict):
            pending.extend((f"{where}.{key}"[:200], child) for key, child in item.items())
        elif isinstance(item, list):
            pending.extend((f"{where}[{index}]"[:200], child) for index, child in enumerate(item))
    return None


def read_regime_state(path: Path, regime: str | None = None, policy: str | None = None) -> dict[str, Any]:
    """The state mapping of the regime state file ``path``, checked: strict JSON of this format and version, of
    ``regime`` and ``policy`` where given, accepted by the named regime's ``state_check``. Raises
    :class:`RegimeStateError` (one line naming ``path``)."""
    try:
        if path.stat().st_size > MAX_STATE_BYTES:
            raise ValueError(f"{path.stat().st_size:,} bytes, more than a regime state holds")
        saved = strict_json(path.read_text())
        if not isinstance(saved, dict) or saved.get("format") != REGIME_STATE_FORMAT:
            raise ValueError(f"not a {REGIME_STATE_FORMAT} file")
        if saved.get("version") != REGIME_STATE_VERSION:
            raise ValueError(f"version {str(saved.get('version'))[:40]}, not {REGIME_STATE_VERSION}")
        state = saved.get("state")
        if not isinstance(state, dict):
            raise TypeError("its state is not a mapping")
    except (OSError, ValueError, TypeError, RecursionError, UnicodeDecodeError) as err:
        raise RegimeStateError(f"{path}: unreadable regime state ({type(err).__name__}: "
                               f"{' '.join(str(err).split())[:200]})") from None
    for key, mine in (("regime", regime), ("policy", policy)):
        if mine is not None and saved.get(key) != mine:
            raise RegimeStateError(f"{path}: the state of {key} {str(saved.get(key))[:80]!r}, not {mine!r}")
    problem = _regime_problem(str(saved.get("regime")), state)
    if problem is not None:
        raise RegimeStateError(f"{path}: regime state of {str(saved.get('regime'))[:80]!r}: "
                               f"{' '.join(problem.split())[:300]}")
    return state


def _regime_problem(regime: str, state: dict[str, Any]) -> str | None:
    """The named regime's own check of ``state`` (None: fine, or a regime not registered in this process, whose
    worker then refuses the name)."""
    from mutualrl.errors import UsageError
    from mutualrl.regimes.core.registry import get_regime

    try:
        spec = get_regime(regime)
    except UsageError:
        return None
    return spec.state_check(state) if spec.state_check is not None else None


def whole_count(value: Any) -> bool:
    """A JSON whole number >= 0 (not a boolean, not a float)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_optional_rescue_counts(state: Any) -> str | None:
    """:func:`check_rescue_counts`, where an empty state is a fresh budget too (byte-kd's checkpoints saved ``{}``
    before it had a rescue)."""
    return check_rescue_counts(state) if state else None


def check_rescue_counts(state: Any) -> str | None:
    """A rescue budget's saved counters (SGT's, opd-sgt's ``state_dict``): ``rescues_total`` and, per prompt id, the
    steps that rescued it, whole numbers >= 0; None when they are, else what is wrong."""
    if not whole_count(state.get("rescues_total")):
        return f"rescues_total {str(state.get('rescues_total'))[:40]} is not a whole number >= 0"
    by_prompt = state.get("rescues_by_prompt", {})
    if not isinstance(by_prompt, dict):
        return "rescues_by_prompt is not a mapping of prompt ids to counts"
    wrong = next((key for key, count in by_prompt.items() if not whole_count(count)), None)
    if wrong is not None:
        return f"rescues_by_prompt[{wrong[:80]!r}] {str(by_prompt[wrong])[:40]} is not a whole number >= 0"
    return None

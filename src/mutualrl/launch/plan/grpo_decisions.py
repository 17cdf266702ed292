"""What one planning stage decides of a policy's GRPOConfig arguments.

A stage (device adaptation, batch derivation, the checkpoints resume keeps) reads the recipe's fields and returns
only the fields it decides, the ones it drops and a note for each change a user should see; the plan merges every
stage's decision once, over the recipe's fields (``launch_plan._policy_grpo``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GRPODecision:
    """The GRPOConfig fields one stage decides for a policy."""

    fields: dict[str, Any] = field(default_factory=dict)
    """Set over the recipe's values."""
    dropped: tuple[str, ...] = ()
    """Removed from the recipe's fields where present (TRL refuses them beside the fields set, or on this device)."""
    notes: list[str] = field(default_factory=list)
    """One line per change a user should see in the dry run."""

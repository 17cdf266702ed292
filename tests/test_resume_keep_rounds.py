"""``grpo.save_total_limit`` keeps the checkpoint ``--resume`` needs when checkpoints are closer than a round.

In lock-step a policy trains the whole round its peers published with it: up to ``updates`` (optimizer steps per
exchange round) steps past a peer that stopped at the round's first step. Saving every ``save_steps`` < ``updates``
steps, it writes several checkpoints in that lead, and transformers deletes the oldest beyond the limit: the last
checkpoint the stopped peer holds must not be among them, or ``--resume`` finds no common checkpoint and starts over.
"""

from __future__ import annotations

import pytest

from mutualrl.config.loader import load_run_config
from mutualrl.launch.plan.checkpoints import resume_keep


def lock_step_keep_suffices(keep: int, updates: int, save_steps: int, steps: int = 64) -> bool:
    """Whether, wherever peer B stops (after ``b`` optimizer steps; in its save at ``b``, cut short, or after it),
    the leader A, which trains on to the end of the last round B published, still keeps B's last intact checkpoint
    after transformers' rotation."""
    for b in range(1, steps):
        for cut in ([True, False] if b % save_steps == 0 else [False]):
            intact = [c for c in range(save_steps, b + 1, save_steps) if not (cut and c == b)]
            if not intact:
                continue
            # B publishes the round starting at b (generates it) only after its save at b
            a = b if cut and b % updates == 0 else (b // updates) * updates + updates
            kept = list(range(save_steps, a + 1, save_steps))[-keep:]
            if intact[-1] not in kept:
                return False
    return True


def grpo_of(updates: int, save_steps: int) -> dict:
    return {"save_steps": save_steps, "steps_per_generation": 64 * updates, "gradient_accumulation_steps": 64}


@pytest.mark.parametrize(("updates", "save_steps"), [(4, 80), (4, 4), (1, 1), (4, 1), (4, 2), (4, 3), (8, 3)])
def test_lock_step_keeps_the_last_common_checkpoint(updates, save_steps):
    """Failed before for save_steps < updates: two checkpoints were kept (with 4 updates a round and a save every
    step, the leader deleted the stopped peer's last checkpoint)."""
    config = load_run_config("tiny").config
    keep = resume_keep(config, grpo_of(updates, save_steps))
    assert lock_step_keep_suffices(keep, updates, save_steps)
    assert keep == 2 or not lock_step_keep_suffices(keep - 1, updates, save_steps)  # and no more than needed

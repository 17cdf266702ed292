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


def keep_suffices(keep: int, updates: int, save_steps: int, staleness: int = 0, steps: int = 96) -> bool:
    """Whether, wherever peer B stops (after ``b`` optimizer steps; in its save at ``b``, cut short, or after it),
    the leader A, which trains on to the end of the last round B published (and ``staleness`` rounds more), still
    keeps B's last intact checkpoint after transformers' rotation."""
    for b in range(1, steps):
        for cut in ([True, False] if b % save_steps == 0 else [False]):
            intact = [c for c in range(save_steps, b + 1, save_steps) if not (cut and c == b)]
            if not intact:
                continue
            # B publishes the round starting at b (generates it) only after its save at b
            published = b // updates - (1 if cut and b % updates == 0 else 0)
            a = (published + staleness + 1) * updates
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
    assert keep_suffices(keep, updates, save_steps)
    assert keep == 2 or not keep_suffices(keep - 1, updates, save_steps)  # and no more than needed


@pytest.mark.parametrize(("staleness", "updates", "save_steps"), [(1, 4, 80), (2, 4, 4), (1, 4, 1), (2, 4, 3),
                                                                  (1, 1, 1), (3, 2, 5)])
def test_bounded_staleness_keeps_the_last_common_checkpoint(staleness, updates, save_steps):
    """Failed before for save_steps < updates (1 round of staleness, 4 updates a round, a save every step: 6 kept,
    9 needed)."""
    config = load_run_config("tiny", overrides=[f"see.max_staleness={staleness}"]).config
    assert keep_suffices(resume_keep(config, grpo_of(updates, save_steps)), updates, save_steps, staleness)

"""The reward ``benchmarks/fidelity.py`` adds to the task's verifier: a signal in every group, whatever the model.

A fidelity check compares parameters after N steps, so it is vacuous when nothing moves. With the task's
verifier alone, a model that answers all K samples of a prompt alike (the tiny pool's models are built to:
right on their strong family, wrong on their blind spot) gets zero advantage in every group and no gradient
(seen on a fresh machine: ``frac_reward_zero_std`` 1.0 at every step). This reward alternates 0, 1 along
the generation batch, and TRL puts a prompt's K >= 2 samples next to each other, so every group holds both
values: a nonzero advantage for any model, from the same function in both trainers.
"""

from __future__ import annotations


def alternating(completions: list, **_: object) -> list[float]:
    """0, 1, 0, 1, ... by place in the batch (TRL's signature; the completions' text is not read)."""
    return [float(i % 2) for i in range(len(completions))]

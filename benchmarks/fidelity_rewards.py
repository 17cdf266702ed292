"""The reward ``benchmarks/fidelity.py`` adds to the task's verifier: a signal in every group, whatever the model.

A fidelity check compares parameters after N steps, so it is vacuous when nothing moves. With the task's
verifier alone, a model that answers all K samples of a prompt alike (the tiny pool's models are built to:
right on their strong family, wrong on their blind spot) gets zero advantage in every group and no gradient
(seen on a fresh machine: ``frac_reward_zero_std`` 1.0 at every step). This reward alternates 0, 0.5 along
the generation batch, and TRL puts a prompt's K >= 2 samples next to each other, so neighbours in a group
differ by 0.5 here while the 0/1 verifier changes a sum by 0 or 1: two neighbours' totals differ by 0.5 or 1.5,
never 0. A nonzero advantage for any model, from the same function in
both trainers. (0, 1 would not do: a group the verifier scored 1, 0, 1, 0 sums to 1, 1, 1, 1.)
"""

from __future__ import annotations


def alternating(completions: list, **_: object) -> list[float]:
    """0, 0.5, 0, 0.5, ... by place in the batch (TRL's signature; the completions' text is not read)."""
    return [0.5 * (i % 2) for i in range(len(completions))]

"""Prompt-paired comparison: a group against its baseline on the same held-out prompts, seed by seed.

Every run of a sweep scores the same held-out prompts and keeps each prompt's score
(``RUN/eval/<policy>/step-N.json``). The per-seed Δ of :mod:`.report_stats` treats those prompts as fixed; a claim
about the task (new prompts of the same kind) must also pay for which prompts were drawn. The two-level cluster
bootstrap does both: resample seeds with replacement, then, within each drawn seed, its prompts with replacement,
and take the mean per-prompt difference (Field & Welsh, 2007, on bootstrapping clustered data; Miller, 2024,
"Adding Error Bars to Evals", for why prompts are the unit of sampling error in an eval).

With few seeds the seed level of the resampling is as coarse as any bootstrap over few values, so the interval
is given beside the seed-level t interval, never instead of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Resamples of the two-level bootstrap, drawn in chunks so that 10 seeds × 1 000 prompts stay within memory.
REPS = 2000
CHUNK = 250
SEED = 0
CONFIDENCE = 0.95


@dataclass
class PromptPaired:
    """Δ over seeds and prompts: the mean per-prompt difference and its two-level bootstrap interval."""

    seeds: int
    prompts: int  # prompts every paired run scored
    mean_difference: float
    ci95: tuple[float, float] | None
    note: str | None

    def to_json(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "prompts": self.prompts, "mean_difference": self.mean_difference,
                "ci95": list(self.ci95) if self.ci95 else None, "note": self.note}


def difference_matrix(ours: Mapping[Any, Mapping[str, float]], theirs: Mapping[Any, Mapping[str, float]]
                      ) -> tuple[list[Any], list[str], Any]:
    """``seed -> prompt id -> score`` of the group and of its baseline, as a (seeds × prompts) array of
    differences on the seeds both have and the prompts every one of those runs scored."""
    import numpy as np

    seeds = sorted(set(ours) & set(theirs), key=str)
    if not seeds:
        return [], [], np.zeros((0, 0))
    shared = set.intersection(*(set(ours[s]) & set(theirs[s]) for s in seeds))
    prompts = sorted(shared)
    matrix = np.array([[ours[s][p] - theirs[s][p] for p in prompts] for s in seeds], dtype=float)
    return seeds, prompts, matrix.reshape(len(seeds), len(prompts))


def two_level_interval(matrix: Any, reps: int = REPS, seed: int = SEED,
                       confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile interval of the mean of a (seeds × prompts) matrix under the two-level bootstrap: seeds
    drawn with replacement, then prompts with replacement within each drawn seed."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n_seeds, n_prompts = matrix.shape
    means = []
    for start in range(0, reps, CHUNK):
        size = min(CHUNK, reps - start)
        rows = rng.integers(n_seeds, size=(size, n_seeds))  # which seeds each resample holds
        cols = rng.integers(n_prompts, size=(size, n_seeds, n_prompts))  # which prompts within each drawn seed
        means.append(matrix[rows[:, :, None], cols].mean(axis=(1, 2)))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(np.concatenate(means), [tail, 100 - tail])
    return float(low), float(high)


def prompt_paired(ours: Mapping[Any, Mapping[str, float]], theirs: Mapping[Any, Mapping[str, float]]
                  ) -> PromptPaired | None:
    """The prompt-paired Δ of a group against its baseline (None without a seed or prompt in common)."""
    seeds, prompts, matrix = difference_matrix(ours, theirs)
    if not seeds or not prompts:
        return None
    counts = {len(ours[s]) for s in seeds} | {len(theirs[s]) for s in seeds}
    notes = []
    if counts != {len(prompts)}:
        notes.append(f"only the {len(prompts)} prompts every paired run scored are compared")
    if len(seeds) < 2:
        notes.append("one seed: the interval is over prompts only")
    ci = two_level_interval(matrix) if matrix.size > 1 else None
    return PromptPaired(seeds=len(seeds), prompts=len(prompts), mean_difference=float(matrix.mean()), ci95=ci,
                        note="; ".join(notes) or None)

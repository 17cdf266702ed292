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

#: Resamples of the two-level bootstrap.
REPS = 2000
#: The most numbers drawn at once (about 16 MB of indices and values): the bootstrap's memory, whatever the size.
BUDGET = 1 << 20
#: A seed's differences with at most this many distinct values are resampled through their counts.
MAX_DISTINCT = 256
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
    drawn with replacement, then prompts with replacement within each drawn seed (each drawn seed's prompts drawn
    anew). Memory: reps × seeds numbers and at most :data:`BUDGET` more, whatever the prompt count: a resample's
    mean over a seed's prompts is drawn from the counts of that seed's distinct differences (a multinomial: the
    same distribution, a handful of numbers for 0/1 scores), or from prompt indices drawn a budget at a time."""
    import numpy as np

    rng = np.random.default_rng(seed)
    matrix = np.asarray(matrix, dtype=float)
    n_seeds = matrix.shape[0]
    drawn = rng.integers(n_seeds, size=(reps, n_seeds))  # which seeds each resample holds
    inner = np.empty((reps, n_seeds))  # each drawn seed's mean over its resampled prompts
    for s in range(n_seeds):
        slots = np.nonzero(drawn == s)
        inner[slots] = resampled_means(matrix[s], len(slots[0]), rng)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(inner.mean(axis=1), [tail, 100 - tail])
    return float(low), float(high)


def resampled_means(row: Any, count: int, rng: Any) -> Any:
    """``count`` means of ``row``'s values drawn with replacement (as many as it has), independently."""
    import numpy as np

    n = row.size
    out = np.empty(count)
    values, counts = np.unique(row, return_counts=True)
    if values.size <= MAX_DISTINCT:  # how often each distinct value is drawn: exactly the same distribution
        per = max(1, BUDGET // values.size)
        for start in range(0, count, per):
            size = min(per, count - start)
            out[start:start + size] = rng.multinomial(n, counts / n, size=size) @ values / n
        return out
    if n <= BUDGET:
        per = max(1, BUDGET // n)
        for start in range(0, count, per):
            size = min(per, count - start)
            out[start:start + size] = row[rng.integers(n, size=(size, n))].mean(axis=1)
        return out
    for i in range(count):  # more prompts than the budget: one resample's sum in pieces
        out[i] = sum(float(row[rng.integers(n, size=min(BUDGET, n - start))].sum())
                     for start in range(0, n, BUDGET)) / n
    return out


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

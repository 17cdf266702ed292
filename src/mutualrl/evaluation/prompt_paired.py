"""Prompt-paired differences: a group against its baseline on the same held-out prompts, seed by seed.

Every run of a sweep scores the same held-out prompts and keeps each prompt's score
(``RUN/eval/<policy>/step-N.json``); the report's crossed seeds x prompts interval (:mod:`.crossed`) reads the
(seed x prompt) matrix of differences this module builds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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

"""Where do the policies of a pool complement each other? (paper, App. "Cross-policy complementarity")

From per-prompt success of several models on the *same* prompts (eval results, or one
validation step of a run) this module computes the paper's tables:

- Tab. complementarity-pairs: per ordered (learner, peer) pair, both success rates, the
  Jaccard overlap of their success sets ``|S_l ∩ S_p| / |S_l ∪ S_p|`` and the rescue rate
  ``P(peer succeeds | learner fails) = |F_l ∩ S_p| / |F_l|``;
- Tab. complementarity-pool: mean single-model success, and the fraction of prompts
  solved by any / all / exactly one model;
- Tab. complementarity-difficulty: the same Jaccard and exactly-one rates inside
  equal-size easy / medium / hard buckets of prompts ranked by mean reward;
- Tab. regime-overlap (channel decomposition): per (prompt, learner), whether XGRPO, SGT
  and PRP would be *usable* -- see :func:`usability_table` for what eval results can and
  cannot tell.

Conventions (documented in docs/evaluation.md):

- success = score >= ``threshold`` (0.5 by default; verifier scores are 0 or 1);
- an undefined rate (Jaccard of two empty success sets, rescue rate of a learner that
  never fails) is ``None``, shown as "-";
- difficulty buckets: prompts sorted by mean reward across the models, highest first
  (easy), ties broken by ``prompt_id`` in ascending string order; ``n`` prompts split into
  buckets whose sizes differ by at most one, the earlier (easier) buckets taking the extra
  prompts (500 -> 167 / 167 / 166, as in the paper);
- with more than two models, a bucket's "Jaccard" is the mean over all unordered pairs.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mutualrl.errors import DataError
from mutualrl.evaluation.results import ModelEvalResult, json_number
from mutualrl.regimes.prp.spec import PRP
from mutualrl.regimes.sgt.spec import SGT
from mutualrl.regimes.xgrpo.spec import XGRPO

BUCKET_NAMES = {3: ("easy", "medium", "hard")}
TIE_RULE = ("prompts sorted by mean reward across models, highest first; ties broken by prompt_id (ascending); "
            "bucket sizes differ by at most one, easier buckets take the extra prompts")


@dataclass
class Outcomes:
    """Scores of several models on the prompts they all answered, aligned by ``prompt_id``."""

    models: list[str]
    prompt_ids: list[str]
    tasks: list[str]
    scores: np.ndarray  # (n_prompts, n_models)
    threshold: float
    dropped: dict[str, int]  # model -> prompts it has that not every model has

    @property
    def success(self) -> np.ndarray:
        return self.scores >= self.threshold

    def subset(self, rows: np.ndarray | list[int]) -> Outcomes:
        rows = np.asarray(rows, dtype=int)
        return Outcomes(
            models=self.models,
            prompt_ids=[self.prompt_ids[i] for i in rows],
            tasks=[self.tasks[i] for i in rows],
            scores=self.scores[rows],
            threshold=self.threshold,
            dropped={},
        )


def _unique_names(results: Sequence[ModelEvalResult]) -> list[str]:
    names = [r.name if r.step is None else f"{r.name}@{r.step}" for r in results]
    counts: dict[str, int] = {}
    out = []
    for n in names:
        counts[n] = counts.get(n, 0) + 1
        out.append(n if names.count(n) == 1 else f"{n}#{counts[n]}")
    return out


def align(results: Sequence[ModelEvalResult], threshold: float = 0.5) -> Outcomes:
    """Align models by ``prompt_id``; only prompts every model answered are kept (the others are counted)."""
    if len(results) < 2:
        raise DataError(f"complementarity needs at least two models' results, got {len(results)}")
    names = _unique_names(results)
    per_model: list[dict[str, float]] = []
    task_of: dict[str, str] = {}
    for name, r in zip(names, results, strict=True):
        scores: dict[str, float] = {}
        for rec in r.records:
            if rec.prompt_id in scores:
                raise DataError(f"results of {name}: prompt {rec.prompt_id!r} appears twice")
            scores[rec.prompt_id] = rec.score
            task_of.setdefault(rec.prompt_id, rec.task)
        per_model.append(scores)
    common = set(per_model[0])
    for scores in per_model[1:]:
        common &= set(scores)
    if not common:
        raise DataError("the models' results share no prompt_id: were they evaluated on the same prompts?")
    # Keep the first model's order (deterministic), restricted to the common prompts.
    ordered = [pid for pid in per_model[0] if pid in common]
    matrix = np.array([[scores[pid] for scores in per_model] for pid in ordered], dtype=float)
    dropped = {name: len(scores) - len(common) for name, scores in zip(names, per_model, strict=True)}
    return Outcomes(names, ordered, [task_of[p] for p in ordered], matrix, threshold, dropped)


def alignment_notes(out: Outcomes) -> list[str]:
    """What a reader of the tables must be told about the pairing: the models did not all score the same prompts,
    so only those every model scored are compared (``dropped``: each model's prompts left out)."""
    dropped = {model: count for model, count in out.dropped.items() if count}
    if not dropped:
        return []
    return [f"the models scored different prompts: only the {len(out.prompt_ids)} every model scored are compared "
            f"({'; '.join(f'{model}: {count} more left out' for model, count in dropped.items())})"]


# ---------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------


def _rate(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def jaccard(a: np.ndarray, b: np.ndarray) -> float | None:
    """|A ∩ B| / |A ∪ B| of two boolean success vectors (None when both sets are empty)."""
    return _rate(int(np.sum(a & b)), int(np.sum(a | b)))


def pair_table(out: Outcomes) -> list[dict[str, Any]]:
    """Tab. complementarity-pairs: every ordered (learner, peer) pair."""
    s = out.success
    rows = []
    for i, j in itertools.permutations(range(len(out.models)), 2):
        learner, peer = s[:, i], s[:, j]
        fails = ~learner
        rows.append(
            {
                "learner": out.models[i],
                "peer": out.models[j],
                "learner_success": float(learner.mean()),
                "peer_success": float(peer.mean()),
                "jaccard": jaccard(learner, peer),
                "peer_rescues_fail": _rate(int(np.sum(fails & peer)), int(np.sum(fails))),
                "learner_failures": int(np.sum(fails)),
                "rescued": int(np.sum(fails & peer)),
            }
        )
    return rows


def pool_table(out: Outcomes) -> dict[str, Any]:
    """Tab. complementarity-pool: mean single-model success and any / all / exactly-one / no-model success."""
    s = out.success
    solved_by = s.sum(axis=1)
    n = len(out.prompt_ids)
    return {
        "n": n,
        "per_model": {m: float(s[:, k].mean()) for k, m in enumerate(out.models)},
        "mean_single": float(s.mean()),
        "any": float(np.mean(solved_by >= 1)),
        "all": float(np.mean(solved_by == len(out.models))),
        "exactly_one": float(np.mean(solved_by == 1)),
        "none": float(np.mean(solved_by == 0)),
    }


def difficulty_order(out: Outcomes, difficulty: Mapping[str, float] | None = None) -> list[int]:
    """Row indices from easiest to hardest (see the module docstring for the tie rule).

    ``difficulty`` (optional) maps prompt_id -> mean reward from elsewhere (e.g. several
    samples per prompt); by default it is the mean score across the analysed models.
    """
    if difficulty is None:
        mean = out.scores.mean(axis=1)
    else:
        missing = [p for p in out.prompt_ids if p not in difficulty]
        if missing:
            raise DataError(f"difficulty scores lack {len(missing)} prompt(s), e.g. {missing[0]!r}")
        mean = np.array([difficulty[p] for p in out.prompt_ids], dtype=float)
    return sorted(range(len(out.prompt_ids)), key=lambda i: (-mean[i], out.prompt_ids[i]))


def difficulty_table(
    out: Outcomes, n_buckets: int = 3, difficulty: Mapping[str, float] | None = None
) -> list[dict[str, Any]]:
    """Tab. complementarity-difficulty: Jaccard and exactly-one (and any/all) success per difficulty bucket."""
    if n_buckets < 1:
        raise ValueError("n_buckets must be >= 1")
    order = difficulty_order(out, difficulty)
    names = BUCKET_NAMES.get(n_buckets, tuple(f"bucket {k + 1}" for k in range(n_buckets)))
    mean = out.scores.mean(axis=1) if difficulty is None else np.array([difficulty[p] for p in out.prompt_ids])
    rows = []
    for name, idx in zip(names, np.array_split(np.array(order, dtype=int), n_buckets), strict=True):
        if len(idx) == 0:
            rows.append({"bucket": name, "n": 0, "jaccard": None, "exactly_one": None, "any": None, "all": None,
                         "mean_reward_min": None, "mean_reward_max": None, "per_model": {}, "pairs": []})
            continue
        sub = out.subset(idx)
        s = sub.success
        pairs = [
            {"models": [sub.models[i], sub.models[j]], "jaccard": jaccard(s[:, i], s[:, j])}
            for i, j in itertools.combinations(range(len(sub.models)), 2)
        ]
        defined = [p["jaccard"] for p in pairs if p["jaccard"] is not None]
        pool = pool_table(sub)
        rows.append(
            {
                "bucket": name,
                "n": len(idx),
                "mean_reward_min": float(mean[idx].min()),
                "mean_reward_max": float(mean[idx].max()),
                "jaccard": float(np.mean(defined)) if defined else None,
                "exactly_one": pool["exactly_one"],
                "any": pool["any"],
                "all": pool["all"],
                "per_model": pool["per_model"],
                "pairs": pairs,
            }
        )
    return rows


# ---------------------------------------------------------------------------------------
# Regime usability (Tab. regime-overlap)
# ---------------------------------------------------------------------------------------

Groups = Mapping[str, Mapping[str, Sequence[float]]]
"""prompt_id -> policy -> rewards of that policy's rollouts (K per policy; K = 1 for eval results)."""

USABILITY_LABELS = {
    "none": "None of the three",
    "xgrpo_only": "Only XGRPO",
    "xgrpo+sgt": "XGRPO and SGT, not PRP",
    "prp_only": "Only PRP",
    "prp+xgrpo": "PRP and XGRPO, not SGT",
    "all": "All three",
    "sgt_only": "Only SGT",
    "prp+sgt": "PRP and SGT, not XGRPO",
}
"""Row label of each cell of :data:`mutualrl.evaluation.channel_decomposition.USABILITY_CELLS` (which says what a cell is), in
the table's order: the paper's :data:`PAPER_ROWS` rows, then the combinations the paper does not list."""

PAPER_ROWS = 6


def groups_from_results(out: Outcomes) -> dict[str, dict[str, list[float]]]:
    """Eval outcomes as reward groups with one rollout per policy (K = 1)."""
    return {
        pid: {m: [float(out.scores[r, k])] for k, m in enumerate(out.models)} for r, pid in enumerate(out.prompt_ids)
    }


def usability_table(
    groups: Groups,
    prp_ratios: Mapping[tuple[str, str], Sequence[float]] | None = None,
    *,
    success: float = 0.8,
    failure: float = 0.2,
    ratio_band: tuple[float, float] = (0.8, 1.2),
) -> dict[str, Any]:
    """Tab. regime-overlap: over (prompt, learner) pairs, which regimes could use the prompt.

    - XGRPO: pooled reward normalisation changes the learner's advantage;
    - SGT: the learner fails everywhere and a peer succeeds (the SGT gate);
    - PRP: some peer response has importance ratio in ``ratio_band`` for the learner. The
      ratios come from a PRP run (its SEE records: learner log-probs of peer responses over
      the peer's THL-aligned log-probs), so they are **not** in eval results; pass
      ``prp_ratios`` ``{(prompt_id, learner): [ratio, ...]}`` to fill the PRP column,
      otherwise it is reported as not available and rows are split by XGRPO x SGT only.

    Each (prompt, learner) is decided by :func:`mutualrl.evaluation.channel_decomposition.regime_usability`, the one
    definition (GRPO's sample std in both advantages; it says why). With eval results (K = 1 per policy,
    0/1 rewards) XGRPO-usable means the policies disagree on the prompt and SGT-usable means the learner
    failed where a peer succeeded. Every policy must have the same number of rollouts of a prompt.
    """
    counts: dict[tuple[bool | None, bool, bool], int] = {}
    per_learner: dict[str, dict[str, int]] = {}
    missing_ratios = 0
    total = 0
    for pid, by_policy in groups.items():
        if len(by_policy) < 2:
            continue
        for learner, rewards in by_policy.items():
            peers = [list(rs) for name, rs in by_policy.items() if name != learner]
            ratios = None if prp_ratios is None else prp_ratios.get((pid, learner))
            missing_ratios += prp_ratios is not None and ratios is None
            key = usable_by(rewards, peers, ratios, ratio_band=ratio_band, success=success, failure=failure)
            p_ok, x_ok, s_ok = key
            counts[key] = counts.get(key, 0) + 1
            stats = per_learner.setdefault(learner, {"n": 0, XGRPO.name: 0, SGT.name: 0, PRP.name: 0})
            stats["n"] += 1
            stats[XGRPO.name] += int(x_ok)
            stats[SGT.name] += int(s_ok)
            stats[PRP.name] += int(bool(p_ok))
            total += 1
    if total == 0:
        raise DataError("regime usability needs prompts answered by at least two policies")
    prp_known = prp_ratios is not None and missing_ratios == 0
    rows = _usability_rows(counts, total, prp_known)
    note = None if prp_known else _no_prp_note(missing_ratios)
    return {
        "n_pairs": total,
        "prp_available": prp_known,
        "thresholds": {"success": success, "failure": failure, "ratio_band": list(ratio_band)},
        "rows": rows,
        "per_learner": {
            name: {k: (v / st["n"] if k != "n" else v) for k, v in st.items() if k != PRP.name or prp_known}
            for name, st in per_learner.items()
        },
        "note": note,
    }


def usable_by(rewards: Sequence[float], peers: list[list[float]], ratios: Sequence[float] | None, *,
              ratio_band: tuple[float, float], success: float, failure: float) -> tuple[bool | None, bool, bool]:
    """One (prompt, learner): whether PRP (None without ``ratios``), XGRPO and SGT could use it, as
    :func:`~mutualrl.evaluation.channel_decomposition.regime_usability` decides."""
    import torch  # local: the other tables need no torch

    from mutualrl.evaluation.channel_decomposition import regime_usability

    usable = regime_usability(
        torch.tensor([list(rewards)], dtype=torch.float64),  # [1, K]
        torch.tensor([peers], dtype=torch.float64),  # [1, M-1, K]
        None if ratios is None else torch.tensor([list(ratios)], dtype=torch.float64),  # [1, R]
        ratio_band=ratio_band, success_threshold=success, failure_threshold=failure)
    return None if ratios is None else bool(usable.prp[0]), bool(usable.xgrpo[0]), bool(usable.sgt[0])


def _no_prp_note(missing_ratios: int) -> str:
    """The table's note when its PRP column is not known: the ratios it needs, and how many pairs had none."""
    return ("PRP usability needs importance ratios of peer responses under the learner (from a PRP run's SEE "
            "records), which eval results do not contain; pass them to fill the PRP column"
            + (f" ({missing_ratios} (prompt, learner) pairs had no ratios)" if missing_ratios else "") + ".")


def _usability_rows(counts: Mapping[tuple[bool | None, bool, bool], int], total: int,
                    prp_known: bool) -> list[dict[str, Any]]:
    """The rows of :func:`usability_table` from its counts per (PRP, XGRPO, SGT) usability: the paper's rows when
    the PRP column is known (a combination it does not list only when it occurs), else XGRPO x SGT ("Only SGT"
    only when it occurs)."""
    from mutualrl.evaluation.channel_decomposition import USABILITY_CELLS  # torch: imported where usability_table needs it

    rows = []
    if prp_known:
        cells = {name: (p, x, s) for name, p, x, s in USABILITY_CELLS}
        for index, (name, label) in enumerate(USABILITY_LABELS.items()):
            p, x, s = cells[name]
            c = counts.get((p, x, s), 0)
            if c or index < PAPER_ROWS:
                rows.append({"label": label, PRP.name: p, XGRPO.name: x, SGT.name: s, "count": c, "fraction": c / total})
    else:
        for label, x, s in (
            ("Neither XGRPO nor SGT", False, False),
            ("Only XGRPO", True, False),
            ("XGRPO and SGT", True, True),
            ("Only SGT", False, True),
        ):
            c = sum(v for (p, xx, ss), v in counts.items() if xx == x and ss == s)
            if c or label != "Only SGT":
                rows.append({"label": label, PRP.name: None, XGRPO.name: x, SGT.name: s, "count": c,
                             "fraction": c / total})
    return rows

def read_prp_ratios(path: str | Path) -> dict[tuple[str, str], list[float]]:
    """``{"prompt_id", "learner", "ratios": [...]}`` JSON lines -> the ``prp_ratios`` mapping."""
    out: dict[tuple[str, str], list[float]] = {}
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror})") from None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key = (row["prompt_id"], row["learner"])
            ratios = row["ratios"]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, RecursionError) as err:
            raise DataError(
                f"{path}: line {lineno}: expected {{prompt_id, learner, ratios: [numbers]}} ({str(err)[:200]})"
            ) from None
        if not all(isinstance(part, str) for part in key) or not isinstance(ratios, list):
            raise DataError(f"{path}: line {lineno}: expected {{prompt_id, learner, ratios: [numbers]}}: prompt_id "
                            "and learner are strings, ratios a list")
        ratios = [json_number(x, f"{path}: line {lineno}: ratios[{i}]:") for i, x in enumerate(ratios)]
        out.setdefault(key, []).extend(ratios)
    return out


# ---------------------------------------------------------------------------------------
# Everything at once
# ---------------------------------------------------------------------------------------


def analyze(
    results: Sequence[ModelEvalResult],
    *,
    threshold: float = 0.5,
    n_buckets: int = 3,
    difficulty: Mapping[str, float] | None = None,
    prp_ratios: Mapping[tuple[str, str], Sequence[float]] | None = None,
) -> dict[str, Any]:
    """All complementarity tables for ``results`` (several models on the same prompts), as a JSON-ready dict."""
    out = align(results, threshold)
    report: dict[str, Any] = {
        "models": out.models,
        "n_prompts": len(out.prompt_ids),
        "tasks": sorted(set(out.tasks)),
        "threshold": threshold,
        "dropped_prompts": out.dropped,
        "pairs": pair_table(out),
        "pool": pool_table(out),
        "difficulty": {
            "tie_rule": TIE_RULE,
            "source": "given" if difficulty is not None else "mean score across models",
            "buckets": difficulty_table(out, n_buckets, difficulty),
        },
        "usability": usability_table(groups_from_results(out), prp_ratios),
        "notes": alignment_notes(out),
    }
    if len(set(out.tasks)) > 1:
        by_task = {}
        for task in sorted(set(out.tasks)):
            rows = [i for i, t in enumerate(out.tasks) if t == task]
            sub = out.subset(rows)
            by_task[task] = {"pool": pool_table(sub), "pairs": pair_table(sub)}
        report["by_task"] = by_task
    return report

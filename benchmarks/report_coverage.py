"""How often `mutualrl report`'s intervals cover the quantity each names, by simulation with the report's own
functions; and whether its seeds-for-power plan holds for its own test. Prints the tables docs/evaluation.md quotes.

The model (probit, like a verifier's 0/1 reward of one greedy completion per prompt): prompt ``j`` has a difficulty
``θ_j``; seed ``i`` of an arm (the baseline, or the method) has a skill ``u_i`` (a part shared by both arms of the
same seed, the pairing, and a part of its own); the method adds ``δ_j`` on prompt ``j``; the run solves the prompt
when ``θ_j + u_i (+ δ_j) + ε_ij > 0``, ``ε`` normal (half of it shared by the two arms of a seed). Scenarios:

- ``near-deterministic``: 85 % of the prompts always or never solved (θ = ±4), the rest θ ~ N(0, 1), and an effect
  that varies by prompt; 87-95 % of the prompts score the same in every seed, as in the real runs (70-98 %);
- ``near-deterministic, sparse``: 95 % always or never solved: 96-98 % the same in every seed;
- ``prompt-specific effect``: as ``near-deterministic``, but the method helps some prompts and hurts others
  (δ_j ~ N(0.1, 1.5²)) while seeds differ little: Δ's prompt part dominates, which a nested bootstrap misses;
- ``graded``: θ ~ N(1, 6²), no always/never class: 79-92 % the same in every seed;
- ``uniform``: every prompt live (θ ~ N(0, 1)), one effect on every prompt: 17-66 % the same.

"The task" is the expected reward@1 (or Δ) over new seeds and new prompts (closed form under the model); "these
prompts" the expected one over new seeds, the drawn prompts held fixed. The intervals: the conservative crossed
seeds × prompts one of a task row as the report used it until 2026-11-28 (:mod:`mutualrl.evaluation.crossed`; the
current one, over a grid of harder cases: ``benchmarks/report_grid.py``), the t over seeds of a prompts row (given
only with some spread, as the report does), and two that the report no longer uses, for comparison: the two-level
(nested) bootstrap it used before, and Owen's pigeonhole bootstrap (both percentile, 400 resamples, fewer repeats).

    python benchmarks/report_coverage.py              # the coverage tables (a few minutes with the bootstraps)
    python benchmarks/report_coverage.py --power      # the plan against a simulation of the report's own test
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from mutualrl.evaluation.crossed import half_width, parts, report_half_width, variance_parts

#: name -> (share of prompts always/never solved, θ's SD where not, θ's mean, effect's SD over prompts,
#: its mean, seed skill SD shared by a seed's two arms, its own part's SD)
SCENARIOS: dict[str, dict[str, float]] = {
    "near-deterministic": dict(fixed=0.85, theta_sd=1.0, mu=0.0, tau=0.5, d0=0.25, shared=0.3, own=0.3),
    "near-deterministic, sparse": dict(fixed=0.95, theta_sd=1.0, mu=0.0, tau=0.5, d0=0.25, shared=0.3, own=0.3),
    "prompt-specific effect": dict(fixed=0.85, theta_sd=1.0, mu=0.0, tau=1.5, d0=0.1, shared=0.3, own=0.1),
    "graded": dict(fixed=0.0, theta_sd=6.0, mu=1.0, tau=0.5, d0=0.25, shared=0.3, own=0.3),
    "uniform": dict(fixed=0.0, theta_sd=1.0, mu=0.0, tau=0.0, d0=0.15, shared=0.3, own=0.15),
}
#: For the power check: the near-deterministic models with an effect that a few dozen seeds can detect.
POWER_SCENARIOS: dict[str, dict[str, float]] = {
    "near-deterministic, Δ ≈ 0.04": {**SCENARIOS["near-deterministic"], "d0": 1.0},
    "prompt-specific effect, Δ ≈ 0.03": {**SCENARIOS["prompt-specific effect"], "d0": 0.8},
    "uniform": SCENARIOS["uniform"],
    "near-deterministic, seeds alike, Δ ≈ 0.02": {**SCENARIOS["near-deterministic"], "d0": 0.45, "tau": 0.2,
                                                   "shared": 0.05, "own": 0.05},
}
#: The θ of an always-solved prompt (and minus it: never solved).
EXTREME = 4.0


@dataclass
class Draw:
    """``repeats`` sweeps of ``seeds`` × ``prompts``: each arm's 0/1 scores, the task's truths (scalars) and these
    prompts' truths (one per repeat)."""

    ours: Any
    base: Any
    task_delta: float
    task_mean: float
    fixed_delta: Any
    fixed_mean: Any


def draw(rng: np.random.Generator, scenario: str, repeats: int, seeds: int, prompts: int) -> Draw:
    """``repeats`` independent sweeps of the scenario's model (see the module's docstring)."""
    k = {**SCENARIOS, **POWER_SCENARIOS}[scenario]
    kind = rng.random((repeats, prompts))
    live = rng.normal(k["mu"], k["theta_sd"], (repeats, prompts))
    theta = np.where(kind < k["fixed"] / 2, EXTREME, np.where(kind < k["fixed"], -EXTREME, live))
    delta = k["d0"] + k["tau"] * rng.normal(size=(repeats, prompts))
    shared = rng.normal(0, k["shared"], (repeats, seeds, 1))
    u_ours, u_base = (shared + rng.normal(0, k["own"], (repeats, seeds, 1)) for _ in range(2))
    common = rng.normal(size=(repeats, seeds, prompts))
    noise = [np.sqrt(0.5) * common + np.sqrt(0.5) * rng.normal(size=common.shape) for _ in range(2)]
    ours = (theta[:, None, :] + delta[:, None, :] + u_ours + noise[0] > 0).astype(float)
    base = (theta[:, None, :] + u_base + noise[1] > 0).astype(float)
    skill = k["shared"] ** 2 + k["own"] ** 2
    task_ours, task_base = task_value(k, k["d0"], k["tau"] ** 2, skill), task_value(k, 0.0, 0.0, skill)
    scale = np.sqrt(1 + skill)  # a fixed prompt's solve rate over new seeds: Φ((θ (+ δ)) / scale)
    fixed_ours, fixed_base = stats.norm.cdf((theta + delta) / scale), stats.norm.cdf(theta / scale)
    return Draw(ours, base, task_ours - task_base, task_ours,
                (fixed_ours - fixed_base).mean(axis=1), fixed_ours.mean(axis=1))


def task_value(k: dict[str, float], shift: float, shift_var: float, skill: float) -> float:
    """The expected reward@1 over new seeds and new prompts: E Φ(...) of a normal is Φ(mean / sqrt(1 + var))."""
    live = stats.norm.cdf((k["mu"] + shift) / np.sqrt(1 + skill + shift_var + k["theta_sd"] ** 2))
    ends = [stats.norm.cdf((sign * EXTREME + shift) / np.sqrt(1 + skill + shift_var)) for sign in (1, -1)]
    return float(k["fixed"] / 2 * sum(ends) + (1 - k["fixed"]) * live)


def crossed_covers(matrix: Any, truth: Any, conservative: bool = False) -> Any:
    """Per repeat: does the report's crossed 95 % interval of a (repeats, seeds, prompts) stack hold ``truth``
    (``conservative``: the conservative form alone, as the report used it before)?"""
    if conservative:
        mean, v_seed, v_prompt = variance_parts(matrix)
        return np.abs(mean - truth) <= half_width(v_seed, v_prompt, matrix.shape[-2], matrix.shape[-1])
    found = parts(matrix)
    return np.abs(found.mean - truth) <= report_half_width(found)


def seed_t_covers(matrix: Any, truth: Any) -> tuple[Any, Any]:
    """Per repeat: does the t interval over the per-seed means hold ``truth``, and was one given (some spread)?"""
    per_seed = matrix.mean(axis=-1)
    n = per_seed.shape[-1]
    sd = per_seed.std(axis=-1, ddof=1)
    given = per_seed.max(axis=-1) - per_seed.min(axis=-1) > 1e-12
    half = stats.t.ppf(0.975, n - 1) * sd / np.sqrt(n)
    return given & (np.abs(per_seed.mean(axis=-1) - truth) <= half), given


def bootstrap_covers(matrix: Any, truth: float, rng: np.random.Generator, nested: bool, reps: int = 400) -> Any:
    """Percentile bootstrap coverage, one repeat at a time: ``nested`` (seeds, then prompts anew within each drawn
    seed: what the report used before) or pigeonhole (seeds and prompts once each, every cell kept: Owen 2007)."""
    hits = []
    for m in matrix:
        seeds, prompts = m.shape
        rows = rng.integers(seeds, size=(reps, seeds))
        if nested:
            means = m[rows[:, :, None], rng.integers(prompts, size=(reps, seeds, prompts))].mean(axis=(1, 2))
        else:
            w_rows = np.stack([np.bincount(r, minlength=seeds) for r in rows]) / seeds
            w_cols = np.stack([np.bincount(c, minlength=prompts) for c in rng.integers(prompts, size=(reps, prompts))])
            means = np.einsum("bi,ij,bj->b", w_rows, m, w_cols / prompts)
        low, high = np.percentile(means, [2.5, 97.5])
        hits.append(low <= truth <= high)
    return np.asarray(hits)


def coverage_row(scenario: str, seeds: int, prompts: int, repeats: int, rng: np.random.Generator,
                 bootstraps: int = 0) -> dict[str, float]:
    """Every interval's coverage of the quantity it names, for one scenario and number of seeds."""
    d = draw(rng, scenario, repeats, seeds, prompts)
    diff = d.ours - d.base
    out = {"same": float((d.ours.min(axis=1) == d.ours.max(axis=1)).mean()),
           "crossed Δ, task": float(crossed_covers(diff, d.task_delta, conservative=True).mean()),
           "crossed mean, task": float(crossed_covers(d.ours, d.task_mean, conservative=True).mean())}
    pairs = (("Δ", diff, d.fixed_delta, d.task_delta), ("mean", d.ours, d.fixed_mean, d.task_mean))
    for what, m, fixed, task in pairs:
        hits, given = seed_t_covers(m, fixed)
        out[f"t {what}, these prompts"] = float(hits[given].mean()) if given.any() else float("nan")
        out[f"t {what}, given"] = float(given.mean())
        out[f"t {what}, task"] = float(seed_t_covers(m, task)[0].mean())  # a point at SD 0 counted as given
    if bootstraps:
        for name, nested in (("nested", True), ("pigeonhole", False)):
            out[f"{name} bootstrap Δ, task"] = float(bootstrap_covers(diff[:bootstraps], d.task_delta, rng,
                                                                      nested).mean())
    return out


def coverage_tables(repeats: int, bootstraps: int) -> None:
    for scenario in SCENARIOS:
        prompts = 200 if scenario == "uniform" else 100
        print(f"\n{scenario}, {prompts} prompts, {repeats} repeats (bootstraps: {bootstraps})")
        rows = {n: coverage_row(scenario, n, prompts, repeats, np.random.default_rng(1000 + n), bootstraps)
                for n in (2, 3, 5, 10)}
        for key in rows[2]:
            print(f"  {key:32s} " + " / ".join(f"{rows[n][key]:.3f}" for n in rows))


def true_components(rng: np.random.Generator, scenario: str, sweeps: int = 200) -> tuple[Any, float]:
    """The scenario's variance components of Δ (the ANOVA estimates averaged over ``sweeps`` draws of 40 seeds ×
    1 000 prompts: each is unbiased, one alone is not precise) and its task Δ."""
    from mutualrl.evaluation.crossed import Components, components

    found = []
    for _ in range(sweeps // 50):
        d = draw(rng, scenario, 50, 40, 1000)
        found += [components(m) for m in d.ours - d.base]
    mean = {key: float(np.mean([getattr(c, key) for c in found])) for key in ("seed", "prompt", "interaction")}
    return Components(**mean), d.task_delta


def power_check(repeats: int, chunk: int = 250, only: str | None = None) -> None:
    """The plan's seeds for each scenario's components (from one large draw, taken as true), against the share of
    fresh binary sweeps whose report p (:func:`~mutualrl.evaluation.crossed.report_half_width`'s test) is below α/m
    (m = 2: Holm's first threshold), the effect being the scenario's own task Δ, at seed counts from half the plan
    up to it: the fewest seeds that reach 80 % in simulation, against the plan's (how far the plan over-asks)."""
    from mutualrl.evaluation.power import crossed_power, seeds_for_crossed

    alpha, prompts = 0.025, 200
    for scenario in [only] if only else POWER_SCENARIOS:
        rng = np.random.default_rng(7)
        comps, effect = true_components(rng, scenario)
        need = seeds_for_crossed(effect, comps, prompts, alpha)
        if need is None or need > 60:
            print(f"{scenario}: Δ {effect:+.4f}: plan {need} seeds; not simulated")
            continue
        reached = []
        for seeds in sorted({max(2, round(need * share)) for share in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)}):
            rejected = 0
            for start in range(0, repeats, chunk):
                found = parts(diff_stack(rng, scenario, min(chunk, repeats - start), seeds, prompts))
                rejected += int(np.sum(np.abs(found.mean) > report_half_width(found, alpha)))
            power = rejected / repeats
            reached += [seeds] if power >= 0.8 else []
            print(f"{scenario}: Δ {effect:+.4f}, components seed {comps.seed:.2e}, prompt {comps.prompt:.2e}, "
                  f"seed x prompt {comps.interaction:.2e}; plan {need} seeds x {prompts} prompts; at {seeds} seeds "
                  f"predicted {crossed_power(effect, comps, seeds, prompts, alpha):.3f}, simulated "
                  f"{power:.3f} ({repeats} sweeps)", flush=True)
        fewest = min(reached) if reached else None
        print(f"{scenario}: plan {need}, fewest simulated seeds reaching 80 %: {fewest}"
              + (f" (the plan asks {need / fewest - 1:+.0%})" if fewest else ""), flush=True)


def diff_stack(rng: np.random.Generator, scenario: str, repeats: int, seeds: int, prompts: int) -> Any:
    """``repeats`` sweeps' (seeds × prompts) matrices of Δ."""
    d = draw(rng, scenario, repeats, seeds, prompts)
    return d.ours - d.base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--bootstraps", type=int, default=500, help="repeats of the two bootstraps (slow)")
    parser.add_argument("--power", action="store_true")
    parser.add_argument("--scenario", help="--power: only this scenario")
    args = parser.parse_args()
    if args.power:
        power_check(args.repeats, only=args.scenario)
    else:
        coverage_tables(args.repeats, args.bootstraps)


if __name__ == "__main__":
    main()

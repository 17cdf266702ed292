"""The report's task-level interval and test over a grid of the cases where they might fail, by simulation with the
report's own functions: coverage of the task's Δ, rejection under the null, power, the interval's width, the
caveats' triggers (few informative prompts, an outlying seed, a failed run), for the form the report used before (the
conservative crossed one) and the one it uses now (:func:`mutualrl.evaluation.crossed.report_half_width`); and
whether a plan from a 3-seed pilot reaches the power it states (``--plans``). Writes the tables of
benchmarks/results/report-grid.md and, with ``--figure``, results/report-grid.png.

The model (probit, a verifier's 0/1 reward of one greedy completion per prompt): prompt ``j`` has a difficulty
``θ_j`` (a share ``fixed`` always or never solved, θ = ±4, the rest N(mu, theta_sd²)); seed ``i`` of an arm has a
skill ``u_i`` (a part shared by both arms of the seed, the pairing, and a part of its own); the method adds
``δ_j`` ~ N(d0, tau²) on a share ``effect_on`` of the prompts (0 elsewhere); a run collapses with probability
``collapse`` (its skill lowered by 8: it solves nothing); the run solves the prompt when θ_j + u_i (+ δ_j)
+ ε_ij > 0, ε normal, half of it shared by a seed's two arms. "The task's Δ" is the expected reward@1 difference
over new seeds and new prompts, in closed form. Every scenario has a null twin (no effect; where runs collapse,
both arms' runs collapse alike), where the rejection rate is measured.

    nice -n 19 python benchmarks/report_grid.py --repeats 2000 --figure      # the grid (a few minutes)
    nice -n 19 python benchmarks/report_grid.py --plans --repeats 400          # plans from 3-seed pilots
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from mutualrl.evaluation.crossed import Components, half_width, informative_prompts, parts, report_half_width, variance_parts
from mutualrl.evaluation.crossed_caveats import FEW_INFORMATIVE, failed_runs, outlying_seeds

#: name -> the model's parameters (module docstring).
SCENARIOS: dict[str, dict[str, float]] = {
    "uniform": dict(fixed=0.0, theta_sd=1.0, mu=0.0, effect_on=1.0, d0=0.15, tau=0.0, shared=0.3, own=0.15),
    "near-deterministic": dict(fixed=0.85, theta_sd=1.0, mu=0.0, effect_on=1.0, d0=0.25, tau=0.5, shared=0.3,
                               own=0.3),
    "few informative (90 % fixed, effect on 3 %)": dict(fixed=0.9, theta_sd=1.0, mu=0.0, effect_on=0.03, d0=5.0,
                                                        tau=0.5, shared=0.3, own=0.3),
    "few informative, seeds barely differ": dict(fixed=0.9, theta_sd=1.0, mu=0.0, effect_on=0.03, d0=5.0, tau=0.5,
                                                 shared=0.05, own=0.05),
    "seed-dominated": dict(fixed=0.5, theta_sd=1.0, mu=0.0, effect_on=1.0, d0=0.25, tau=0.0, shared=0.2, own=0.8),
    "collapsed runs (15 %)": dict(fixed=0.85, theta_sd=1.0, mu=0.0, effect_on=1.0, d0=0.25, tau=0.5, shared=0.3,
                                  own=0.3, collapse=0.15),
    "near-deterministic, small Δ": dict(fixed=0.85, theta_sd=1.0, mu=0.0, effect_on=1.0, d0=0.45, tau=0.2,
                                        shared=0.05, own=0.05),
}
SEEDS, PROMPTS = (2, 3, 5, 10), (50, 200)
#: θ of an always-solved prompt (minus it: never solved); a collapsed run's skill shift.
EXTREME, COLLAPSE_SHIFT = 4.0, -8.0
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Draw:
    """``repeats`` sweeps: each arm's 0/1 scores (repeats, seeds, prompts) and the task's Δ."""

    ours: Any
    base: Any
    task_delta: float


def draw(rng: np.random.Generator, k: dict[str, float], repeats: int, seeds: int, prompts: int,
         null: bool = False) -> Draw:
    """``repeats`` sweeps of the model ``k`` (``null``: no effect, and both arms collapse alike)."""
    kind = rng.random((repeats, prompts))
    live = rng.normal(k["mu"], k["theta_sd"], (repeats, prompts))
    theta = np.where(kind < k["fixed"] / 2, EXTREME, np.where(kind < k["fixed"], -EXTREME, live))
    carried = rng.random((repeats, prompts)) < k["effect_on"]
    delta = np.where(carried, k["d0"] + k["tau"] * rng.normal(size=(repeats, prompts)), 0.0) * (not null)
    shared = rng.normal(0, k["shared"], (repeats, seeds, 1))
    collapse = k.get("collapse", 0.0)
    arms = []
    for arm in range(2):
        skill = shared + rng.normal(0, k["own"], (repeats, seeds, 1))
        if collapse and (arm == 0 or null):
            skill = skill + COLLAPSE_SHIFT * (rng.random((repeats, seeds, 1)) < collapse)
        arms.append(skill)
    common = rng.normal(size=(repeats, seeds, prompts))
    noise = [np.sqrt(0.5) * common + np.sqrt(0.5) * rng.normal(size=common.shape) for _ in range(2)]
    ours = (theta[:, None, :] + delta[:, None, :] + arms[0] + noise[0] > 0).astype(float)
    base = (theta[:, None, :] + arms[1] + noise[1] > 0).astype(float)
    truth = 0.0 if null else task_value(k, effect=True) - task_value(k, effect=False)
    return Draw(ours, base, truth)


def task_value(k: dict[str, float], effect: bool, collapsed: bool | None = None) -> float:
    """Expected reward@1 over new seeds and prompts: a mixture of E Φ(normal) = Φ(mean / sqrt(1 + var))."""
    skill = k["shared"] ** 2 + k["own"] ** 2
    collapse = k.get("collapse", 0.0) if effect else 0.0
    total = 0.0
    for shift, weight in ((0.0, 1 - collapse), (COLLAPSE_SHIFT, collapse)):
        for d_mean, d_var, d_weight in ((k["d0"], k["tau"] ** 2, k["effect_on"] if effect else 0.0),
                                        (0.0, 0.0, 1 - k["effect_on"] if effect else 1.0)):
            for t_mean, t_var, t_weight in ((EXTREME, 0.0, k["fixed"] / 2), (-EXTREME, 0.0, k["fixed"] / 2),
                                            (k["mu"], k["theta_sd"] ** 2, 1 - k["fixed"])):
                scale = np.sqrt(1 + skill + d_var + t_var)
                total += weight * d_weight * t_weight * stats.norm.cdf((t_mean + d_mean + shift) / scale)
    return float(total)


def forms(matrix: Any) -> dict[str, tuple[Any, Any]]:
    """``form -> (mean, half-width)`` per sweep: the conservative form as before (p − 1 df) and the report's."""
    mean, v_seed, v_prompt = variance_parts(matrix)
    seeds, prompts = matrix.shape[-2:]
    return {"before": (mean, half_width(v_seed, v_prompt, seeds, prompts)),
            "now": (mean, report_half_width(parts(matrix)))}


def failed_sweeps(scores: Any) -> Any:
    """Per sweep of a (repeats, seeds, prompts) stack of one arm's scores: does the report name a failed run in it
    (:func:`~mutualrl.evaluation.crossed_caveats.failed_runs`; only a sweep with a run at one value on every prompt
    can have one)."""
    constant = (scores.max(axis=-1) == scores.min(axis=-1)).any(axis=-1)  # (repeats,)
    named = np.zeros(len(scores), dtype=bool)
    for index in np.flatnonzero(constant):
        named[index] = bool(failed_runs({seed: {str(j): float(v) for j, v in enumerate(row)}
                                         for seed, row in enumerate(scores[index])}))
    return named


def cell(rng: np.random.Generator, k: dict[str, float], repeats: int, seeds: int, prompts: int,
         chunk: int = 500) -> dict[str, float]:
    """Every figure of one cell: per form coverage, power (effect), rejection (null), mean half-width; the share
    of sweeps with few informative prompts (under :data:`FEW_INFORMATIVE`), with an outlying seed flagged, with
    neither (uncaveated), and the report's coverage among those with few and among the uncaveated."""
    sums: dict[str, float] = {}

    def add(name: str, value: float) -> None:
        sums[name] = sums.get(name, 0.0) + float(value)

    for start in range(0, repeats, chunk):
        n = min(chunk, repeats - start)
        effect, null = draw(rng, k, n, seeds, prompts), draw(rng, k, n, seeds, prompts, null=True)
        diff, null_diff = effect.ours - effect.base, null.ours - null.base
        for form, (mean, half) in forms(diff).items():
            add(f"coverage {form}", np.sum(np.abs(mean - effect.task_delta) <= half))
            add(f"power {form}", np.sum(np.abs(mean) > half))
            add(f"width {form}", np.sum(2 * half))
        for form, (mean, half) in forms(null_diff).items():
            add(f"null rejection {form}", np.sum(np.abs(mean) > half))
        few = informative_prompts(diff) < FEW_INFORMATIVE
        add("few informative", few.sum())
        mean, half = forms(diff)["now"]
        covered = np.abs(mean - effect.task_delta) <= half
        failed = failed_sweeps(effect.ours) | failed_sweeps(effect.base)
        outlying = outlying_seeds(diff).any(axis=-1)
        flagged = outlying | failed
        add("failed run named", failed.sum())
        add("coverage, sweeps with few", np.sum(few & covered))
        add("coverage, sweeps uncaveated", np.sum(~few & ~flagged & covered))
        add("uncaveated", np.sum(~few & ~flagged))
        add("outlier flagged", outlying.sum())
        add("outlier flagged, null", outlying_seeds(null_diff).any(axis=-1).sum() if seeds >= 3 else 0)
        add("informative", informative_prompts(diff).sum())
    out = {name: value / repeats for name, value in sums.items()}
    for name, among in (("coverage, sweeps with few", "few informative"),
                        ("coverage, sweeps uncaveated", "uncaveated")):
        out[name] = sums[name] / sums[among] if sums[among] else float("nan")
    out["truth"] = draw(rng, k, 1, 2, 2).task_delta
    return out


def grid(repeats: int) -> dict[str, dict[str, dict[str, float]]]:
    """``scenario -> "s seeds × p prompts" -> figures``, each cell seeded apart."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for index, (name, k) in enumerate(SCENARIOS.items()):
        out[name] = {}
        for prompts in PROMPTS:
            for seeds in SEEDS:
                rng = np.random.default_rng([index, prompts, seeds])
                out[name][f"{seeds} × {prompts}"] = cell(rng, k, repeats, seeds, prompts)
                print(f"{name}, {seeds} seeds × {prompts} prompts: " + ", ".join(
                    f"{key} {value:.3f}" for key, value in out[name][f"{seeds} × {prompts}"].items()), flush=True)
    return out


def by_informative(repeats: int) -> dict[str, dict[int, tuple[int, float]]]:
    """The report's coverage binned by the informative prompts a sweep has, over the sparse scenarios at 50 and
    200 prompts and 3-10 seeds: ``seeds -> bin start -> (sweeps, coverage)``: where the caveat's threshold comes
    from."""
    bins = (0, 5, 10, 15, 20, 30, 50, 1000)
    out: dict[str, dict[int, tuple[int, float]]] = {}
    for seeds in SEEDS:
        hits: dict[int, list[float]] = {low: [] for low in bins[:-1]}
        for name in ("few informative (90 % fixed, effect on 3 %)", "few informative, seeds barely differ",
                     "near-deterministic"):
            for prompts in PROMPTS:
                rng = np.random.default_rng([seeds, prompts, len(name)])
                d = draw(rng, SCENARIOS[name], repeats, seeds, prompts)
                diff = d.ours - d.base
                mean, half = forms(diff)["now"]
                covered, found = np.abs(mean - d.task_delta) <= half, informative_prompts(diff)
                for low, high in zip(bins[:-1], bins[1:], strict=True):
                    hits[low] += list(covered[(found >= low) & (found < high)])
        out[str(seeds)] = {low: (len(h), float(np.mean(h)) if h else float("nan")) for low, h in hits.items()}
    return out


def markdown(found: dict[str, dict[str, dict[str, float]]], binned: dict[str, Any], repeats: int) -> str:
    """The tables of results/report-grid.md."""
    cells = list(next(iter(found.values())))
    head = "| scenario (task Δ) | figure | " + " | ".join(cells) + " |"
    lines = [f"{repeats} simulated sweeps per cell (and as many null sweeps); cells are seeds × prompts.", "",
             head, "|" + " --- |" * (len(cells) + 2)]
    shown = ("coverage before", "coverage now", "null rejection before", "null rejection now", "power before",
             "power now", "width before", "width now", "few informative", "coverage, sweeps with few", "uncaveated",
             "coverage, sweeps uncaveated", "outlier flagged", "outlier flagged, null", "failed run named")
    for name, row in found.items():
        truth = next(iter(row.values()))["truth"]
        for figure in shown:
            values = " | ".join(f"{row[c][figure]:.3f}" for c in cells)
            lines.append(f"| {name} ({truth:+.3f}) | {figure} | {values} |")
    lines += ["", "Coverage of the report's interval by the sweep's informative prompts (three sparse scenarios, "
              "50 and 200 prompts pooled; sweeps, coverage):", "",
              "| seeds | " + " | ".join(f"≥ {low}" for low in next(iter(binned.values()))) + " |",
              "|" + " --- |" * (len(next(iter(binned.values()))) + 1)]
    for seeds, bins in binned.items():
        lines.append(f"| {seeds} | " + " | ".join(f"{n}: {c:.3f}" if n else "-" for n, c in bins.values()) + " |")
    return "\n".join(lines) + "\n"


def figure(found: dict[str, dict[str, dict[str, float]]], path: Path) -> None:
    """Coverage, null rejection and power, before and now, per scenario (a panel per figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(next(iter(found.values())))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharex=True)
    for ax, figure_name, line in zip(axes, ("coverage", "null rejection", "power"), (0.93, 0.05, None),
                                     strict=True):
        for index, (name, row) in enumerate(found.items()):
            colour = f"C{index}"
            for form, style in (("before", ":"), ("now", "-")):
                ax.plot(range(len(cells)), [row[c][f"{figure_name} {form}"] for c in cells], style, color=colour,
                        marker="o", markersize=3, label=f"{name}, {form}" if figure_name == "coverage" else None)
        if line is not None:
            ax.axhline(line, color="black", linewidth=0.8)
        ax.set_title(f"{figure_name} (dotted: before; solid: now)")
        ax.set_xticks(range(len(cells)), cells, rotation=60, fontsize=7)
    fig.legend(loc="lower center", ncol=4, fontsize=6)
    fig.tight_layout(rect=(0, 0.18, 1, 1))
    fig.savefig(path, dpi=120)


#: Normal crossed models a 3-seed pilot is drawn from: (name, components, effect, prompts), Holm over 2 (α 0.025).
PLAN_CASES = (
    ("prompt and interaction", Components(seed=0.0008, prompt=0.0015, interaction=0.04), 0.03, 150),
    ("prompt-led", Components(seed=0.0001, prompt=0.004, interaction=0.02), 0.03, 100),
    ("seed-led", Components(seed=0.004, prompt=0.0005, interaction=0.04), 0.05, 100),
)


def plan_check(pilots: int, pilot_seeds: int = 3, alpha: float = 0.025) -> dict[str, dict[str, float]]:
    """Per case: the seeds the true components need, and over ``pilots`` simulated pilots of ``pilot_seeds``
    seeds the share whose plan reaches that (as observed, and at the upper confidence limits: the range's two
    ends) and the plans' 10th / 50th / 90th percentiles."""
    from mutualrl.evaluation.crossed import components
    from mutualrl.evaluation.power import seeds_for_crossed, upper_components

    out = {}
    for index, (name, comps, effect, prompts) in enumerate(PLAN_CASES):
        rng = np.random.default_rng([7, index])
        need = seeds_for_crossed(effect, comps, prompts, alpha)
        plans = []
        for _ in range(pilots):
            pilot = (rng.normal(0, np.sqrt(comps.seed), (pilot_seeds, 1))
                     + rng.normal(0, np.sqrt(comps.prompt), (1, prompts))
                     + rng.normal(0, np.sqrt(comps.interaction), (pilot_seeds, prompts)))  # (seeds, prompts)
            found = components(pilot)
            plans.append((seeds_for_crossed(effect, found, prompts, alpha),
                          seeds_for_crossed(effect, upper_components(found, pilot_seeds, prompts), prompts, alpha)))
        low, high = np.array(plans, dtype=float).T
        out[name] = {"needed": need, "observed reaches": float(np.mean(low >= need)),
                     "upper reaches": float(np.mean(high >= need)),
                     **{f"observed p{q}": float(np.percentile(low, q)) for q in (10, 50, 90)},
                     **{f"upper p{q}": float(np.percentile(high, q)) for q in (10, 50, 90)}}
        print(f"{name}: needs {need} seeds × {prompts} prompts; from {pilots} pilots of {pilot_seeds} seeds: "
              + ", ".join(f"{key} {value:g}" for key, value in out[name].items()), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000, help="simulated sweeps per cell")
    parser.add_argument("--figure", action="store_true", help="also draw results/report-grid.png")
    parser.add_argument("--plans", action="store_true", help="plans from 3-seed pilots against the truth")
    args = parser.parse_args()
    if args.plans:
        plan_check(args.repeats)
        return
    found, binned = grid(args.repeats), by_informative(args.repeats)
    text = markdown(found, binned, args.repeats)
    print(text)
    (RESULTS / "report-grid.json").write_text(json.dumps({"repeats": args.repeats, "grid": found,
                                                          "by_informative": binned}, indent=1) + "\n")
    if args.figure:
        figure(found, RESULTS / "report-grid.png")


if __name__ == "__main__":
    main()

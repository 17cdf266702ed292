"""The real-model pool's RL comparison: does a real model learn the lexicon its peer knows? (``smol-lexicon``)

The rule was written before any run (benchmarks/results/learning-real-pool.md, "The later RL comparison's rule"):
standalone GRPO, SGT, byte-kd (its canonical form: the amendment before any run) without and with SGT's rescue, and
opd-sgt, each on RL seeds 11-16, RL seed ``s`` on the warm-start adapters of seed ``1 + (s - 11) mod 3`` (built by
benchmarks/lexicon_warm_start.py). Every (regime, seed)
is a real ``mutualrl train --pool smol-lexicon``; only the regime and the seed differ::

    python benchmarks/lexicon_rl.py run --warm-start DIR --out RUNS                # every regime, seeds 11-16
    python benchmarks/lexicon_rl.py run --warm-start DIR --out RUNS --seeds 11     # one seed of every regime
    python benchmarks/lexicon_rl.py report --out RUNS                              # the table and the verdicts

``DIR`` is the ``--out`` given to lexicon_warm_start.py (its ``adapters/`` folder). ``run`` is resumable across days:
a finished run is reused, and a run stopped mid-way (the box rebooted, Ctrl-C) continues from its last checkpoint
(``mutualrl train --resume``; the recipe saves every 10 steps). Each run's output goes to ``RUNS/<run>.log``.
A run is reused or resumed only when its ``config.yaml`` holds the settings this command gives it, and ``report``
reads only runs of the rule (:func:`rule_settings`: the recipe's length, the whole validation split, the RL seed,
the paired warm starts, the regime's own settings): any other run found there -- a smoke test's ``--max-steps 2
--set validation.limit=4``, exact byte-kd -- is refused in one line naming it; give such runs their own ``--out``.
``report`` writes ``RUNS/lexicon-rl.json`` and ``RUNS/lexicon-rl.md``: per regime and policy, the weak- and the
strong-family Δ against standalone on the same seeds, with the crossed seeds × prompts 95% interval and p of
``mutualrl report`` (docs/evaluation.md), the number of prompts it is computed on and of those whose Δ varies (the
interval's coverage was checked from 20 such prompts on), and the rule's verdict (on the unrounded interval); then
every regime's final accuracy per policy and family, per seed and its mean (the levels each Δ is a difference of).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from mutualrl.config.lookup import MISSING, value_at  # noqa: E402
from run_folder import resume_command, run_state  # noqa: E402

POOL = "smol-lexicon"
BASELINE = "standalone"
# byte-kd in its canonical form (the amendment of 2026-11-29 19:45 UTC, before any RL run: the exact form cost
# 238 s to over 600 s a step here and its launch plan needs 26 GiB; results/learning-real-pool.md). SGT's rescue
# in byte-kd's loss at SGT's own weight (the paper's lambda 0.1), so the two rescues are the same term; without it
# (named, not left to the default, so the run check holds it to 0).
CANONICAL = ["--set", "regime.bytekd.distribution=canonical"]
REGIME_ARGS = {
    "standalone": ["--regime", "standalone"],
    "sgt": ["--regime", "sgt"],
    "byte-kd": ["--regime", "byte-kd", *CANONICAL, "--set", "regime.bytekd.rescue_lam=0.0"],
    "byte-kd-rescue": ["--regime", "byte-kd", *CANONICAL, "--set", "regime.bytekd.rescue_lam=0.1"],
    "opd-sgt": ["--regime", "opd-sgt"],
}
RL_SEEDS = (11, 12, 13, 14, 15, 16)
# Who was warm-started on what (the pre-registration): a policy's strong family is the one it learned.
WARM_STARTS = {"smollm2-135m": "velish", "gemma3-270m": "ombric"}
WEAK = {"smollm2-135m": "ombric", "gemma3-270m": "velish"}
STRONG_MARGIN = -0.05  # the rule: a help may not cost the strong family an interval lying below this
INFORMATIVE_CHECKED = 20  # the crossed interval's coverage (about 0.93 or more) was simulated from this many on


def warm_start_seed(rl_seed: int) -> int:
    """The warm-start seed an RL seed runs on: 11, 14 -> 1; 12, 15 -> 2; 13, 16 -> 3."""
    return 1 + (rl_seed - 11) % 3


def adapter_name(policy: str, rl_seed: int) -> str:
    """The folder name of ``policy``'s warm-start adapter that RL seed ``rl_seed`` runs on."""
    return f"{policy}-{WARM_STARTS[policy]}-seed{warm_start_seed(rl_seed)}"


def adapter_settings(warm_start: Path, rl_seed: int) -> tuple[list[str], list[str]]:
    """The ``--set`` overrides naming each policy's warm-start adapter of ``rl_seed``; and the missing ones, each
    with the command that builds it."""
    seed = warm_start_seed(rl_seed)
    overrides, missing = [], []
    for policy, family in WARM_STARTS.items():
        folder = (warm_start / "adapters" / adapter_name(policy, rl_seed)).resolve()
        build = (f"python benchmarks/lexicon_warm_start.py train --model {policy} --family {family} --seed {seed} "
                 f"--out {warm_start}")
        overrides += ["--set", f"pool.policies.{policy}.init_adapter={folder}",
                      "--set", f"pool.policies.{policy}.init_adapter_build={build}"]
        if not (folder / "adapter_config.json").is_file():
            missing.append(f"{folder} (build it: {build})")
    return overrides, missing


def recipe_max_steps() -> int:
    """The rule's run length: the recipe's own ``grpo.max_steps`` (recipes/pools/smol-lexicon.yaml)."""
    from mutualrl.config.loader import read_yaml, resolve_recipe

    return read_yaml(resolve_recipe(POOL))["grpo"]["max_steps"]


def rule_settings(regime: str, rl_seed: int, max_steps: int, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """What a run of ``regime`` on ``rl_seed`` holds in its ``config.yaml`` (dotted keys; a policy by its name):
    ``max_steps`` steps, the whole validation split, the RL seed, each policy's warm start of the paired seed (by
    its folder's name), the regime's name and ``--set`` settings (REGIME_ARGS), and then ``extra`` (``run --set``)."""
    from mutualrl.config.loader import parse_override

    args = REGIME_ARGS[regime]
    expected: dict[str, Any] = {"grpo.max_steps": max_steps, "validation.limit": None, "grpo.seed": rl_seed,
                                "regime.name": args[1]}
    for policy in WARM_STARTS:
        expected[f"pool.policies.{policy}.init_adapter"] = adapter_name(policy, rl_seed)
    for text in [args[i + 1] for i, word in enumerate(args) if word == "--set"] + list(extra):
        keys, value = parse_override(text)
        expected[".".join(keys)] = value
    return expected


def first_difference(run_dir: Path, expected: dict[str, Any]) -> str | None:
    """The first setting of the run's ``config.yaml`` that is not ``expected``, said; None when all are."""
    from mutualrl.config.typed import ConfigError
    from mutualrl.config.yaml_strict import load_yaml
    from mutualrl.errors import RunFolderError
    from mutualrl.run_folder import read_bytes

    path = run_dir / "config.yaml"
    try:
        data = load_yaml(read_bytes(path).decode("utf-8", errors="replace"), str(path))
    except (OSError, RunFolderError, ConfigError) as err:
        return f"its settings cannot be read ({err})"
    for key, want in expected.items():
        have = value_at(data, key)
        if key.endswith(".init_adapter"):  # the warm start by its folder's name, wherever that folder lies
            same = isinstance(have, str) and Path(have).name == want
        else:
            same = have is not MISSING and have == want
        if not same:
            return f"{key} is {'absent' if have is MISSING else repr(have)}, not {want!r}"
    return None


def refusal(out: Path, regimes: list[str], seeds: list[int], max_steps: int, extra: tuple[str, ...] = (),
            states: tuple[str, ...] = ("done",)) -> str | None:
    """One line refusing the first run in ``out`` (in ``states``) whose settings are not ``rule_settings``'s;
    None when every such run has them."""
    for seed in seeds:
        for regime in regimes:
            run_dir = out / f"{regime}-seed{seed}"
            if run_state(run_dir) not in states:
                continue
            found = first_difference(run_dir, rule_settings(regime, seed, max_steps, extra))
            if found is not None:
                return (f"{run_dir}: {found}; runs of other settings need their own --out: move this run out of "
                        f"{out} (or give this command another --out)")
    return None


def train_command(regime: str, seed: int, run_dir: Path, overrides: list[str], max_steps: int | None,
                  extra: tuple[str, ...] = ()) -> list[str]:
    """A new run's ``mutualrl train``, or ``--resume`` of a stopped one (its own settings: nothing else is given)."""
    if run_state(run_dir) == "started":
        return resume_command(run_dir)
    steps = ["--max-steps", str(max_steps)] if max_steps is not None else []
    return [sys.executable, "-m", "mutualrl", "train", "--pool", POOL, *REGIME_ARGS[regime], "--seed", str(seed),
            "-o", str(run_dir), *overrides, *steps, *(word for text in extra for word in ("--set", text))]


def run_refusal(args: argparse.Namespace, out: Path, regimes: list[str], seeds: list[int]) -> str | None:
    """Why ``run`` may not start: a ``--set`` that is not KEY=VALUE, or a run in ``out`` whose settings are not the
    ones this command gives (a run reused or resumed keeps its own)."""
    from mutualrl.config.loader import parse_override
    from mutualrl.config.typed import ConfigError

    try:
        for text in args.set:
            parse_override(text)
        max_steps = args.max_steps if args.max_steps is not None else recipe_max_steps()
    except ConfigError as err:
        return str(err)
    return refusal(out, regimes, seeds, max_steps, tuple(args.set), states=("done", "started"))


def run_all(args: argparse.Namespace) -> int:
    out, warm_start = Path(args.out).resolve(), Path(args.warm_start).resolve()  # train runs at the repository root
    seeds = [int(s) for s in args.seeds.split(",")]
    regimes = args.regimes.split(",")
    unknown = [r for r in regimes if r not in REGIME_ARGS]
    if unknown:
        print(f"--regimes: unknown {', '.join(unknown)}; known: {', '.join(REGIME_ARGS)}", file=sys.stderr)
        return 2
    missing = sorted({m for seed in seeds for m in adapter_settings(warm_start, seed)[1]})
    if missing:
        print(f"missing warm-start adapter: {missing[0]}" + (f" (and {len(missing) - 1} more)" if missing[1:] else ""),
              file=sys.stderr)
        return 2
    refused = run_refusal(args, out, regimes, seeds)
    if refused:
        print(refused, file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        overrides = adapter_settings(warm_start, seed)[0]
        for regime in regimes:
            run_dir = out / f"{regime}-seed{seed}"
            if run_state(run_dir) == "done":
                print(f"{run_dir.name}: finished, reused", flush=True)
                continue
            command = train_command(regime, seed, run_dir, overrides, args.max_steps, tuple(args.set))
            started = time.time()
            print(f"{run_dir.name}: {'resumed' if '--resume' in command else 'started'} "
                  f"{time.strftime('%H:%M')} (log {out / (run_dir.name + '.log')})", flush=True)
            with open(out / f"{run_dir.name}.log", "a") as log:
                code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
            if code != 0:
                print(f"{run_dir.name}: mutualrl train exited {code} after {time.time() - started:.0f} s; see "
                      f"{out / (run_dir.name + '.log')} (run again to resume it)", file=sys.stderr)
                return code
            print(f"{run_dir.name}: {time.time() - started:.0f} s", flush=True)
    return 0


def family_scores(scores: dict[str, float], family: str) -> dict[str, float]:
    """The prompt scores of one invented-lexicon family."""
    from mutualrl.tasks.invented_lexicon import family_of

    return {prompt: value for prompt, value in scores.items() if family_of(prompt) == family}


def family_delta(ours: dict[int, dict[str, float]], base: dict[int, dict[str, float]]) -> dict[str, Any]:
    """Δ = regime − baseline over the seeds both have and the prompts every run scored (``prompts``: their number):
    the mean, and the crossed seeds × prompts 95% interval and p of ``mutualrl report`` (``crossed_stats``), with
    ``informative_prompts``, the prompts whose Δ varies (the interval's coverage holds from 20). Under 2 seeds there
    is none; where every difference is the same the interval is that value (``spread`` false). Unrounded."""
    from mutualrl.evaluation.crossed import crossed_stats
    from mutualrl.evaluation.prompt_paired import difference_matrix

    seeds, prompts, matrix = difference_matrix(ours, base)
    if not seeds or not prompts:
        return {"seeds": seeds, "prompts": 0, "informative_prompts": None, "mean": None, "ci95": None, "p": None,
                "spread": False, "per_seed": {}, "warm_start_ci95": None}
    found = crossed_stats(matrix)
    spread = found is not None and found.ci95 is not None
    return {"seeds": seeds, "prompts": len(prompts), "informative_prompts": found.informative if found else None,
            "mean": float(matrix.mean()), "ci95": crossed_interval(found), "p": found.p if spread else None,
            "spread": spread,
            "per_seed": {str(s): float(v) for s, v in zip(seeds, matrix.mean(axis=1), strict=True)},
            "warm_start_ci95": warm_start_interval(seeds, matrix)}


def warm_start_interval(seeds: list[int], matrix: Any) -> list[float] | None:
    """The crossed interval with the warm starts as the units (each warm start's RL seeds averaged, prompt by prompt):
    RL seeds that share a warm start are not independent draws of it, so this is read beside the rule's interval (a
    sensitivity check written before any run, not the verdict). None under 2 warm starts; the mean twice where
    nothing varies."""
    import numpy as np

    from mutualrl.evaluation.crossed import crossed_stats

    starts = sorted({warm_start_seed(s) for s in seeds})
    rows = [matrix[[i for i, s in enumerate(seeds) if warm_start_seed(s) == w]].mean(axis=0) for w in starts]
    return crossed_interval(crossed_stats(np.stack(rows)) if len(rows) >= 2 else None)  # rows: [W, P]


def crossed_interval(found: Any) -> list[float] | None:
    """``crossed_stats``'s 95% interval; its mean twice where nothing varies; None where it found no units."""
    if found is None:
        return None
    return list(found.ci95) if found.ci95 is not None else [found.mean, found.mean]


def rounded(cell: dict[str, Any]) -> dict[str, Any]:
    """A Δ cell for display: its mean, interval and seed means to 4 decimals (the verdict is read unrounded)."""
    def four(x: float | None) -> float | None:
        return round(x, 4) if x is not None else None

    return {**cell, "mean": four(cell["mean"]),
            "ci95": [four(x) for x in cell["ci95"]] if cell["ci95"] is not None else None,
            "warm_start_ci95": ([four(x) for x in cell["warm_start_ci95"]]
                                if cell.get("warm_start_ci95") is not None else None),
            "per_seed": {s: four(v) for s, v in cell["per_seed"].items()}}


def rounded_table(table: dict[str, Any]) -> dict[str, Any]:
    """The comparison with every Δ cell :func:`rounded`, for the JSON."""
    return {regime: {policy: {key: rounded(value) if key in ("weak", "strong") else value
                              for key, value in row.items()}
                     for policy, row in policies.items()} for regime, policies in table.items()}


def verdict(weak: dict[str, Any], strong: dict[str, Any]) -> str:
    """The rule: sharing *helps* a policy when its weak-family Δ's interval lies above 0 and its strong-family Δ's
    interval does not lie below −0.05 (read: not wholly below); it *hurts* when the weak interval lies wholly below
    0 or the strong one wholly below −0.05; otherwise *not established* (also with no interval: under 2 seeds)."""
    if weak.get("ci95") is None or strong.get("ci95") is None:
        return "not established"
    weak_low, weak_high = weak["ci95"]
    strong_high = strong["ci95"][1]
    if weak_high < 0 or strong_high < STRONG_MARGIN:
        return "hurts"
    if weak_low > 0:
        return "helps"
    return "not established"


def policy_scores(out: Path, regime: str, seeds: list[int]) -> dict[str, dict[int, dict[str, float]]]:
    """``policy -> seed -> prompt id -> score`` of the final validation of each finished run of ``regime``."""
    from mutualrl.evaluation.report.build import final_values

    found: dict[str, dict[int, dict[str, float]]] = {}
    for seed in seeds:
        run_dir = out / f"{regime}-seed{seed}"
        if run_state(run_dir) != "done":
            continue
        for policy, scores in final_values(run_dir).scores.items():
            found.setdefault(policy, {})[seed] = scores
    return found


def comparison(out: Path, seeds: list[int], regimes: list[str]) -> dict[str, Any]:
    """Every regime's weak- and strong-family Δ against standalone, per policy, and the rule's verdict."""
    base = policy_scores(out, BASELINE, seeds)
    table: dict[str, Any] = {}
    for regime in (r for r in regimes if r != BASELINE):
        ours = policy_scores(out, regime, seeds)
        for policy, weak in WEAK.items():
            strong = WARM_STARTS[policy]
            cells = {}
            for role, family in (("weak", weak), ("strong", strong)):
                mine = {s: family_scores(v, family) for s, v in ours.get(policy, {}).items()}
                theirs = {s: family_scores(v, family) for s, v in base.get(policy, {}).items()}
                cells[role] = {"family": family, **family_delta(mine, theirs)}
            table.setdefault(regime, {})[policy] = {**cells, "verdict": verdict(cells["weak"], cells["strong"])}
    return table


def accuracy_levels(out: Path, seeds: list[int], regimes: list[str]) -> dict[str, Any]:
    """Each regime's final accuracy per policy and family (the share of the family's prompts solved): per seed and
    the mean over the seeds found, the levels every Δ is a difference of (standalone included). Unrounded."""
    levels: dict[str, Any] = {}
    for regime in regimes:
        ours = policy_scores(out, regime, seeds)
        for policy, strong in WARM_STARTS.items():
            for family in (WEAK[policy], strong):
                per_seed = {str(s): sum(found.values()) / len(found)
                            for s, v in sorted(ours.get(policy, {}).items())
                            if (found := family_scores(v, family))}
                mean = sum(per_seed.values()) / len(per_seed) if per_seed else None
                levels.setdefault(regime, {}).setdefault(policy, {})[family] = {"mean": mean, "per_seed": per_seed}
    return levels


def levels_markdown(levels: dict[str, Any]) -> str:
    """:func:`accuracy_levels` as a table: the mean over the seeds, then each seed's accuracy, named by its seed."""
    lines = ["| regime | policy | weak family: mean (per seed) | strong family: mean (per seed) |", "|---|---|---|---|"]
    for regime, policies in levels.items():
        for policy, families in policies.items():
            cells = []
            for family in (WEAK[policy], WARM_STARTS[policy]):
                level = families[family]
                seeds = " ".join(f"{s}: {v:.2f}" for s, v in level["per_seed"].items())
                cells.append(f"{family}: no runs" if level["mean"] is None
                             else f"{family}: {level['mean']:.3f} ({seeds})")
            lines.append(f"| {regime} | {policy} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def markdown(table: dict[str, Any]) -> str:
    def cell(d: dict[str, Any]) -> str:
        if d["mean"] is None:
            return "no runs"
        ci = f" [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]" if d["ci95"] else ""
        p = f", p {d['p']:.3g}" if d.get("p") is not None else ""
        informative = d.get("informative_prompts")
        few = (f": fewer than the {INFORMATIVE_CHECKED} its coverage was checked from"
               if informative is not None and informative < INFORMATIVE_CHECKED and d.get("spread") else "")
        counted = f", {informative} informative prompts{few}" if informative is not None else ""
        starts = d.get("warm_start_ci95")
        by_start = f"; warm starts as units [{starts[0]:+.3f}, {starts[1]:+.3f}]" if starts else ""
        return f"{d['mean']:+.3f}{ci}{p} ({len(d['seeds'])} seeds, {d['prompts']} prompts{counted}{by_start})"

    lines = ["| regime | policy | weak family Δ [95% CI], p (seeds, prompts, informative prompts) | "
             "strong family Δ [95% CI], p (seeds, prompts, informative prompts) | verdict |",
             "|---|---|---|---|---|"]
    for regime, policies in table.items():
        for policy, row in policies.items():
            lines.append(f"| {regime} | {policy} | {row['weak']['family']}: {cell(row['weak'])} | "
                         f"{row['strong']['family']}: {cell(row['strong'])} | {row['verdict']} |")
    lines.append(f"\nInformative prompts: those whose Δ differs between seeds (all but the largest block of prompts "
                 f"with one Δ on every seed); the interval's coverage (about 0.93 or more) was checked by simulation "
                 f"where at least {INFORMATIVE_CHECKED} are (src/mutualrl/evaluation/crossed.py). \"Warm starts as "
                 f"units\": the same interval with each warm start's two RL seeds averaged (they share it), a "
                 f"sensitivity check beside the verdict, not part of it.")
    return "\n".join(lines) + "\n"


def run_seconds(out: Path, regimes: list[str], seeds: list[int]) -> dict[str, float]:
    """Each finished run's wall seconds (its summary), the cost stated beside the result."""
    found = {}
    for regime in regimes:
        for seed in seeds:
            run_dir = out / f"{regime}-seed{seed}"
            if run_state(run_dir) == "done":
                found[run_dir.name] = json.loads((run_dir / "summary.json").read_text()).get("seconds")
    return found


def report(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    seeds = [int(s) for s in args.seeds.split(",")]
    regimes = args.regimes.split(",")
    unknown = [r for r in regimes if r not in REGIME_ARGS]
    if unknown:
        print(f"--regimes: unknown {', '.join(unknown)}; known: {', '.join(REGIME_ARGS)}", file=sys.stderr)
        return 2
    if not out.is_dir():
        print(f"--out {out}: no such folder (the --out given to `run`)", file=sys.stderr)
        return 2
    checked = [BASELINE, *(r for r in regimes if r != BASELINE)]  # the baseline enters every Δ
    refused = refusal(out, checked, seeds, recipe_max_steps())
    if refused:  # only the rule's runs enter the verdict
        print(refused, file=sys.stderr)
        return 2
    table = comparison(out, seeds, regimes)
    levels = accuracy_levels(out, seeds, checked)
    (out / "lexicon-rl.json").write_text(json.dumps({"baseline": BASELINE, "strong_margin": STRONG_MARGIN,
                                                     "regimes": rounded_table(table), "accuracy": levels,
                                                     "run_seconds": run_seconds(out, regimes, seeds)},
                                                    indent=1) + "\n")
    text = markdown(table) + "\nFinal greedy accuracy on each family's held-out prompts (the levels of each Δ):\n\n"
    text += levels_markdown(levels)
    (out / "lexicon-rl.md").write_text(text)
    print(text, end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, helptext in (("run", "train every (regime, seed) not finished yet"),
                           ("report", "the Δ table, the rule's verdicts and the accuracies from the finished runs")):
        cmd = sub.add_parser(name, help=helptext)
        cmd.add_argument("--out", required=True, help="folder of the runs (one per regime and seed)")
        cmd.add_argument("--seeds", default=",".join(map(str, RL_SEEDS)), help="RL seeds (default 11-16)")
        cmd.add_argument("--regimes", default=",".join(REGIME_ARGS), help="regimes (default: the rule's five)")
        if name == "run":
            cmd.add_argument("--warm-start", default="runs/lexicon-warm-start",
                             help="the --out of benchmarks/lexicon_warm_start.py train (holds adapters/)")
            cmd.add_argument("--max-steps", type=int, default=None, help="shorter runs (a smoke test), not the rule's")
            cmd.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                             help="another setting for new runs (a smoke test: validation.limit=4), not the rule's")
    args = parser.parse_args(argv)
    return run_all(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())

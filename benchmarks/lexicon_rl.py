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
A finished run is reused whatever its settings: give ``--max-steps`` or ``--set`` runs (a smoke test) their
own ``--out``.
``report`` writes ``RUNS/lexicon-rl.json`` and ``RUNS/lexicon-rl.md``: per regime and policy, the weak- and the
strong-family Δ against standalone on the same seeds, with the crossed seeds × prompts 95% interval and p of
``mutualrl report`` (docs/evaluation.md), and the rule's verdict.
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
POOL = "smol-lexicon"
BASELINE = "standalone"
# byte-kd in its canonical form (the amendment of 2026-11-29 19:45 UTC, before any RL run: the exact form cost
# 238 s to over 600 s a step here and its launch plan needs 26 GiB; results/learning-real-pool.md). SGT's rescue
# in byte-kd's loss at SGT's own weight (the paper's lambda 0.1), so the two rescues are the same term.
CANONICAL = ["--set", "regime.bytekd.distribution=canonical"]
REGIME_ARGS = {
    "standalone": ["--regime", "standalone"],
    "sgt": ["--regime", "sgt"],
    "byte-kd": ["--regime", "byte-kd", *CANONICAL],
    "byte-kd-rescue": ["--regime", "byte-kd", *CANONICAL, "--set", "regime.bytekd.rescue_lam=0.1"],
    "opd-sgt": ["--regime", "opd-sgt"],
}
RL_SEEDS = (11, 12, 13, 14, 15, 16)
# Who was warm-started on what (the pre-registration): a policy's strong family is the one it learned.
WARM_STARTS = {"smollm2-135m": "velish", "gemma3-270m": "ombric"}
WEAK = {"smollm2-135m": "ombric", "gemma3-270m": "velish"}
STRONG_MARGIN = -0.05  # the rule: a help may not cost the strong family an interval lying below this


def warm_start_seed(rl_seed: int) -> int:
    """The warm-start seed an RL seed runs on: 11, 14 -> 1; 12, 15 -> 2; 13, 16 -> 3."""
    return 1 + (rl_seed - 11) % 3


def adapter_settings(warm_start: Path, rl_seed: int) -> tuple[list[str], list[str]]:
    """The ``--set`` overrides naming each policy's warm-start adapter of ``rl_seed``; and the missing ones, each
    with the command that builds it."""
    seed = warm_start_seed(rl_seed)
    overrides, missing = [], []
    for policy, family in WARM_STARTS.items():
        folder = (warm_start / "adapters" / f"{policy}-{family}-seed{seed}").resolve()
        build = (f"python benchmarks/lexicon_warm_start.py train --model {policy} --family {family} --seed {seed} "
                 f"--out {warm_start}")
        overrides += ["--set", f"pool.policies.{policy}.init_adapter={folder}",
                      "--set", f"pool.policies.{policy}.init_adapter_build={build}"]
        if not (folder / "adapter_config.json").is_file():
            missing.append(f"{folder} (build it: {build})")
    return overrides, missing


def run_state(run_dir: Path) -> str:
    """``done`` (finished: reused), ``started`` (stopped mid-way: resumed) or ``new``."""
    record = run_dir / "run.json"
    status = json.loads(record.read_text()).get("status") if record.is_file() else None
    if status == "done" and (run_dir / "summary.json").is_file():
        return "done"
    return "started" if (run_dir / "config.yaml").is_file() else "new"


def train_command(regime: str, seed: int, run_dir: Path, overrides: list[str], max_steps: int | None,
                  extra: tuple[str, ...] = ()) -> list[str]:
    """A new run's ``mutualrl train``, or ``--resume`` of a stopped one (its own settings: nothing else is given)."""
    if run_state(run_dir) == "started":
        return [sys.executable, "-m", "mutualrl", "train", "--resume", "-o", str(run_dir)]
    steps = ["--max-steps", str(max_steps)] if max_steps is not None else []
    return [sys.executable, "-m", "mutualrl", "train", "--pool", POOL, *REGIME_ARGS[regime], "--seed", str(seed),
            "-o", str(run_dir), *overrides, *steps, *(word for text in extra for word in ("--set", text))]


def run_all(args: argparse.Namespace) -> int:
    out, warm_start = Path(args.out), Path(args.warm_start)
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
    """Δ = regime − baseline over the seeds both have and the prompts every run scored: the mean, and the crossed
    seeds × prompts 95% interval and p of ``mutualrl report`` (``crossed_stats``). Under 2 seeds there is none;
    where every difference is the same the interval is that value (``spread`` false)."""
    from mutualrl.evaluation.crossed import crossed_stats
    from mutualrl.evaluation.prompt_paired import difference_matrix

    seeds, prompts, matrix = difference_matrix(ours, base)
    if not seeds or not prompts:
        return {"seeds": seeds, "prompts": 0, "mean": None, "ci95": None, "p": None, "spread": False, "per_seed": {}}
    found = crossed_stats(matrix)
    mean = float(matrix.mean())
    spread = found is not None and found.ci95 is not None
    ci95 = list(found.ci95) if spread else ([mean, mean] if found is not None else None)
    return {"seeds": seeds, "prompts": len(prompts), "mean": round(mean, 4),
            "ci95": [round(x, 4) for x in ci95] if ci95 is not None else None,
            "p": found.p if spread else None, "spread": spread,
            "per_seed": {str(s): round(float(v), 4) for s, v in zip(seeds, matrix.mean(axis=1), strict=True)}}


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


def markdown(table: dict[str, Any]) -> str:
    def cell(d: dict[str, Any]) -> str:
        if d["mean"] is None:
            return "no runs"
        ci = f" [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]" if d["ci95"] else ""
        p = f", p {d['p']:.3g}" if d.get("p") is not None else ""
        return f"{d['mean']:+.3f}{ci}{p} ({len(d['seeds'])} seeds)"

    lines = ["| regime | policy | weak family Δ [95% CI], p | strong family Δ [95% CI], p | verdict |",
             "|---|---|---|---|---|"]
    for regime, policies in table.items():
        for policy, row in policies.items():
            lines.append(f"| {regime} | {policy} | {row['weak']['family']}: {cell(row['weak'])} | "
                         f"{row['strong']['family']}: {cell(row['strong'])} | {row['verdict']} |")
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
    out = Path(args.out)
    seeds = [int(s) for s in args.seeds.split(",")]
    regimes = args.regimes.split(",")
    table = comparison(out, seeds, regimes)
    (out / "lexicon-rl.json").write_text(json.dumps({"baseline": BASELINE, "strong_margin": STRONG_MARGIN,
                                                     "regimes": table, "run_seconds": run_seconds(out, regimes, seeds)},
                                                    indent=1) + "\n")
    text = markdown(table)
    (out / "lexicon-rl.md").write_text(text)
    print(text, end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, helptext in (("run", "train every (regime, seed) not finished yet"),
                           ("report", "the Δ table and the rule's verdicts from the finished runs")):
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

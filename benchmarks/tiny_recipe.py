"""Build a variant of a tiny model's warm-start recipe, as the set-up builds it, and print what decides the pool.

    python benchmarks/tiny_recipe.py --model tiny-sp --set steps=1000 --set batch_size=64 --out /tmp/variants/sp-a

The build runs in a process of its own under the set-up's CPU-independent kernels and one thread
(``tiny_warm_start.BUILD_ENV``), into ``--out`` (not the asset cache). Printed as JSON: the build's seconds, the
greedy held-out accuracy per family before and after the blind spot, one sample's accuracy and pass@4, and the
probability that a sample begins with the right answer on the train split (``train_answer_probability``: a blind
spot is closed when its mean is far below one over the ~3,200 samples a 200-step run draws on that family). A
variant folder can be trained with a pool YAML whose ``model:`` is that folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from mutualrl.pools.tiny import TINY_MODELS, build_environment  # noqa: E402
from mutualrl.pools.tiny_warm_start import warm_start  # noqa: E402


def variant(name: str, settings: list[str]) -> object:
    """``name``'s recipe with ``field=value`` settings (values read as JSON, else as text)."""
    spec = TINY_MODELS[name]
    fields = {f.name for f in dataclasses.fields(spec)}
    changes = {}
    for item in settings:
        key, _, value = item.partition("=")
        if key not in fields:
            raise SystemExit(f"--set {item}: no recipe field {key!r}; fields: {', '.join(sorted(fields))}")
        try:
            changes[key] = json.loads(value)
        except ValueError:
            changes[key] = value
    return dataclasses.replace(spec, **changes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, choices=sorted(TINY_MODELS))
    parser.add_argument("--set", action="append", default=[], help="a recipe field, FIELD=VALUE (repeatable)")
    parser.add_argument("--out", type=Path, required=True, help="the variant's folder (replaced)")
    parser.add_argument("--in-build-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    spec = variant(args.model, args.set)
    if not args.in_build_process:  # start the build under BUILD_ENV, as the set-up does
        cmd = [sys.executable, __file__, "--in-build-process", "--model", args.model, "--out", str(args.out),
               *(x for item in args.set for x in ("--set", item))]
        raise SystemExit(subprocess.run(cmd, env=build_environment(dict(os.environ))).returncode)
    args.out.mkdir(parents=True, exist_ok=True)
    report = warm_start(spec, args.out)
    keys = ("train_seconds", "total_seconds", "test_accuracy_before_blind_spot", "test_accuracy",
            "test_sampled_accuracy", "train_answer_probability", "sha256")
    print(json.dumps({"model": args.model, "set": args.set, **{k: report[k] for k in keys}}))


if __name__ == "__main__":
    main()

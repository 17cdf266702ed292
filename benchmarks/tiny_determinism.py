"""Do the tiny models' bytes depend on the CPU? Warm starts under emulated CPU capabilities, with and without the pin.

A machine of another kind is emulated by what caps the kernels a library picks: ``ATEN_CPU_CAPABILITY``
(torch's own kernels: avx512, avx2, default) and ``MKL_ENABLE_INSTRUCTIONS`` (MKL's code path: AVX512,
AVX2, SSE4_2). Each variant builds the model in a fresh process, once with the CPU's own kernels
("own") and once under :data:`mutualrl.pools.tiny_warm_start.BUILD_ENV` laid over the variant ("pinned",
as ``mutualrl assets fetch`` builds it: the pin replaces ``ATEN_CPU_CAPABILITY``, MKL's cap stays). Prints a
table of weight digests and one JSON line per build. Usage::

    python benchmarks/tiny_determinism.py [--model tiny-bpe] [--steps N] [--modes own,pinned] [--variants ...]
                                          [--eval-limit N]

``--steps`` defaults to the full recipe (about 1.5-4 min a build on one core); a few hundred steps already
separate the kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

VARIANTS = {
    "native": {},
    "aten-avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "aten-default": {"ATEN_CPU_CAPABILITY": "default"},
    "mkl-sse4_2": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    "mkl-avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "mkl-avx512": {"MKL_ENABLE_INSTRUCTIONS": "AVX512"},
}


def child(name: str, steps: int | None, eval_limit: int | None) -> None:
    """Build ``name`` here, as this process's environment dictates, and print its digest."""
    import torch

    from mutualrl.pools import tiny_warm_start
    from mutualrl.pools.tiny import TINY_MODELS
    from mutualrl.pools.tiny_warm_start import warm_start, weights_digest

    if eval_limit is not None:  # the report's evaluations on fewer prompts; the weights do not depend on them
        for evaluate in ("family_accuracies", "sampled_accuracies"):
            whole = getattr(tiny_warm_start, evaluate)
            setattr(tiny_warm_start, evaluate, lambda *a, _whole=whole, **k: _whole(*a, **{**k, "limit_per_family":
                                                                                           eval_limit}))

    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        report = warm_start(TINY_MODELS[name], Path(folder), steps=steps)
        print(json.dumps({"sha256": weights_digest(Path(folder)), "seconds": round(time.perf_counter() - started, 1),
                          "capability": torch.backends.cpu.get_cpu_capability(),
                          "test_accuracy": report["test_accuracy"]}))


def build(name: str, steps: int | None, eval_limit: int | None, env: dict[str, str]) -> dict:
    args = [sys.executable, __file__, "--child", name] + ([] if steps is None else ["--steps", str(steps)])
    args += [] if eval_limit is None else ["--eval-limit", str(eval_limit)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    from mutualrl.pools.tiny import build_environment

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-bpe")
    parser.add_argument("--steps", type=int, default=None, help="warm-start steps (default: the full recipe)")
    parser.add_argument("--modes", default="own,pinned", help="own (the CPU's own kernels), pinned (BUILD_ENV)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--eval-limit", type=int, default=None,
                        help="prompts per family for the build's report (default: all; the weights are the same)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.eval_limit)
        return
    rows = []
    for mode in args.modes.split(","):
        for variant in args.variants.split(","):
            base = {**os.environ, "OMP_NUM_THREADS": "1", **VARIANTS[variant]}
            env = build_environment(base) if mode == "pinned" else base
            result = {"model": args.model, "steps": args.steps or "full", "mode": mode, "variant": variant,
                      **build(args.model, args.steps, args.eval_limit, env)}
            print(json.dumps(result), flush=True)
            rows.append(result)
    print(f"\n{'mode':<8} {'variant':<13} {'torch kernels':<14} {'sha256':<14} seconds")
    for r in rows:
        print(f"{r['mode']:<8} {r['variant']:<13} {r['capability']:<14} {r['sha256'][:12]:<14} {r['seconds']}")
    for mode in sorted({r["mode"] for r in rows}):
        digests = {r["sha256"] for r in rows if r["mode"] == mode}
        print(f"{mode}: {len(digests)} distinct model(s) over {sum(r['mode'] == mode for r in rows)} builds")


if __name__ == "__main__":
    main()

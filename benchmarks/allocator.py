"""What glibc's allocator settings (``mutualrl/host/allocator.py``) change: kernel time, minor faults, wall, peak RSS.

Side by side, alternating which goes first each round: every case runs once with glibc's defaults and once
with the settings the launcher now gives its policy processes, from the same code (the defaults: the
settings table emptied in the launcher, or the variables left out of a child's environment). Kernel
(system) time and minor faults are the children's ``getrusage`` and hold on a loaded box; wall does not.
Cases:

- ``train``: ``mutualrl train --max-steps 20 --set validation.limit=10`` (the tiny pool, SGT, seed 42);
  the two runs' ``metrics.jsonl`` must agree on every value but the wall-clock fields.
- ``worker``: a worker's start: the worker's imports (as ``benchmarks/worker_start.py``) and
  ``smollm2-135m`` loaded, with one forward and backward pass over a 8 x 64 batch (``--worker-batch``).
- ``sgt-step``: ``mutualrl train --pool smol-arith --regime sgt --max-steps 2 --set validation.limit=4``,
  metrics compared as for ``train``.
- ``warm-start``: one tiny model's warm start from scratch (``python -m mutualrl.pools.tiny tiny-sp`` into an
  empty model cache, the tokenizers linked from the real one), as the set-up runs it.

::

    nice -n 5 python benchmarks/allocator.py --cases train,worker --rounds 5 --out DIR

Prints one line per run and writes ``DIR/allocator.json`` (every run and the medians).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from mutualrl.host.allocator import ALLOCATOR_SETTINGS, allocator_env  # noqa: E402

VARIANTS = ("glibc-default", "mutualrl")
TRAIN_ARGS = {
    "train": ["--max-steps", "20", "--set", "validation.limit=10"],
    "sgt-step": ["--pool", "smol-arith", "--regime", "sgt", "--max-steps", "2", "--set", "validation.limit=4"],
}
# The launcher as `mutualrl train`, with the settings table emptied for glibc's defaults.
LAUNCHER = """
import sys
import mutualrl.host.allocator
if sys.argv.pop(1) == "glibc-default":
    mutualrl.host.allocator.ALLOCATOR_SETTINGS.clear()
from mutualrl.cli.main import main
sys.argv[0] = "mutualrl"
sys.exit(main())
"""
WORKER = """
import sys
import types
from mutualrl.host.process_start import collector_paused_for_imports, imports_done
import mutualrl.training.worker as worker
with collector_paused_for_imports():
    import mutualrl.training.grpo_args, mutualrl.training.trackers
    worker.import_training_stack(types.SimpleNamespace(use_vllm=False))
    imports_done()
import torch
from transformers import AutoModelForCausalLM
from mutualrl.pools.smol import smol_model_dir
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(smol_model_dir("smollm2-135m"), dtype=torch.float32)
rows, length = map(int, sys.argv[1:3])
ids = torch.randint(0, model.config.vocab_size, (rows, length))  # [B, T]
loss = model(input_ids=ids, labels=ids).loss  # []
loss.backward()
print(f"{loss.item():.6f}")
"""
WALL_FIELDS = {"time", "step_time", "eval/seconds"}


def clean_env() -> dict[str, str]:
    """Our environment without any allocator setting, so the variant alone decides."""
    return {k: v for k, v in os.environ.items() if k not in ALLOCATOR_SETTINGS and k != "GLIBC_TUNABLES"}


# Runs one command in a fresh process and prints its process tree's getrusage: peak RSS is then this run's alone.
TREE_USAGE = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.call(sys.argv[2:])
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "system_s": usage.ru_stime, "user_s": usage.ru_utime, "minor_faults": usage.ru_minflt,
               "wall_s": time.perf_counter() - start, "peak_rss_mib": usage.ru_maxrss / 1024}, out)
"""


def measured(argv: list[str], env: dict[str, str], log: Path) -> dict[str, float]:
    """Run ``argv`` to its end: its process tree's system and user CPU, minor faults, wall, and the peak RSS of its
    largest process."""
    usage_file = log.with_suffix(".usage.json")
    with log.open("w") as out:
        subprocess.run([sys.executable, "-c", TREE_USAGE, str(usage_file), *argv], env=env, stdout=out,
                       stderr=subprocess.STDOUT, cwd=ROOT, timeout=1800, check=True)
    usage = json.loads(usage_file.read_text())
    if usage.pop("code"):
        sys.exit(f"{' '.join(argv)} failed; see {log}")
    return usage


def run_case(case: str, variant: str, out: Path, tag: str, worker_batch: str = "8x64") -> dict[str, float | str]:
    env = clean_env()
    log = out / f"{tag}.log"
    if case in TRAIN_ARGS:
        run_dir = out / tag
        argv = [sys.executable, "-c", LAUNCHER, variant, "train", *TRAIN_ARGS[case], "--output-dir", str(run_dir)]
        result: dict[str, float | str] = dict(measured(argv, env, log))
        result["metrics"] = str(run_dir / "metrics.jsonl")
        return result
    if variant == "mutualrl":
        env.update(allocator_env(env))
    if case == "worker":
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
        result = dict(measured([sys.executable, "-c", WORKER, *worker_batch.split("x")], env, log))
        result["loss"] = log.read_text().split()[-1]
        return result
    return warm_start(env, out, tag, log)


def warm_start(env: dict[str, str], out: Path, tag: str, log: Path) -> dict[str, float | str]:
    """tiny-sp built from scratch into a fresh model cache (tokenizers and data linked from the real cache)."""
    from mutualrl.assets.cache import cache_dir

    cache = Path(tempfile.mkdtemp(prefix=f"{tag}-cache-", dir=out))
    for entry in cache_dir().iterdir():
        if entry.name != "models":
            (cache / entry.name).symlink_to(entry)
    env.update(MUTUALRL_CACHE=str(cache), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    result: dict[str, float | str] = dict(measured([sys.executable, "-m", "mutualrl.pools.tiny", "tiny-sp"], env, log))
    report = next((cache / "models").glob("tiny-sp-*/warm_start.json"), None)
    result["loss"] = json.dumps(json.loads(report.read_text()).get("final_loss")) if report else "?"
    shutil.rmtree(cache)
    return result


def metric_values(path: str) -> list[tuple]:
    """Every row of a run's metrics.jsonl but its wall-clock fields, in a stable order."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    keep = [sorted((k, v) for k, v in row.items()
                   if k not in WALL_FIELDS and not k.endswith(("_s", "_seconds"))) for row in rows]
    return sorted(tuple(r) for r in keep)


def identical(runs: list[dict]) -> bool:
    if "metrics" in runs[0]:
        first = metric_values(str(runs[0]["metrics"]))
        return all(metric_values(str(r["metrics"])) == first for r in runs[1:])
    return len({r["loss"] for r in runs}) == 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="train,worker", help="comma-separated: train, worker, sgt-step, warm-start")
    parser.add_argument("--rounds", type=int, default=5, help="pairs of runs per case (alternating order)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs, logs and allocator.json")
    parser.add_argument("--worker-batch", default="8x64",
                        help="ROWSxTOKENS of the worker case's forward and backward pass (1x8: a smoke test's size)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"date": time.strftime("%Y-%m-%d"), "cpu_count": os.cpu_count(), "settings": allocator_env({}),
                    "loadavg_before": os.getloadavg(), "cases": {}}
    for case in args.cases.split(","):
        runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for round_ in range(args.rounds):
            for variant in (VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]):
                result = run_case(case, variant, args.out, f"{case}-{variant}-{round_}", args.worker_batch)
                runs[variant].append(result)
                print(f"{case} round {round_} {variant:13s}: system {result['system_s']:6.2f} s, user "
                      f"{result['user_s']:6.2f} s, {result['minor_faults'] / 1e6:6.3f} M faults, wall "
                      f"{result['wall_s']:6.1f} s, peak RSS {result['peak_rss_mib']:6.0f} MiB", flush=True)
        figures = ("system_s", "user_s", "minor_faults", "wall_s", "peak_rss_mib")
        medians = {v: {k: statistics.median(float(r[k]) for r in rs) for k in figures} for v, rs in runs.items()}
        same = identical([r for rs in runs.values() for r in rs])
        report["cases"][case] = {"runs": runs, "medians": medians, "results_identical": same}
        print(json.dumps({case: {"medians": medians, "results_identical": same}}, indent=1), flush=True)
    report["loadavg_after"] = os.getloadavg()
    (args.out / "allocator.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

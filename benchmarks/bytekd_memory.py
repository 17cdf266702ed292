"""byte-kd's learner term at a real vocabulary: its next-byte log-masses from the logits, through the lean autograd
function (``next_byte_logps``: keeps only the logits for the backward) against autograd's composition
(``symbol_logps`` of ``log_softmax``), side by side.

Each (path, round) runs in a fresh process on the same random logits ``[rows, completion, vocab]`` (float32) and a
fixed symbol table: the bytes autograd saved for the backward (each storage once), the process's peak resident memory above what it held
with the logits made (``/proc/self/clear_refs`` resets the peak first), and the forward + backward wall time. The
figures are ratios lean / composition; results/bytekd-memory.md.

    PYTHONPATH=src python benchmarks/bytekd_memory.py --vocab 151936 --rows 2 --completion 256 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PATHS = ("lean", "composition")


def status_kib(field: str) -> int:
    """``VmHWM`` / ``VmRSS`` of this process, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure(path: str, vocab: int, rows: int, completion: int) -> dict:
    """One forward + backward of the weighted log-masses (the shape of ``symbol_kl``'s use of them), in this process."""
    import torch

    from mutualrl.regimes.core.next_bytes import SYMBOLS, next_byte_logps, symbol_logps

    generator = torch.Generator().manual_seed(0)
    symbols = torch.randint(0, 256, (vocab,), generator=generator)  # [V] a byte per token
    logits = (torch.randn(rows, completion, vocab, generator=generator) * 3).requires_grad_(True)  # [R, C, V]
    weights = torch.randn(rows, completion, SYMBOLS, generator=generator)  # [R, C, 258]
    saved: dict[int, int] = {}  # each distinct storage once (an expanded index is a view of [V], not [R, C, V])

    def pack(tensor):
        saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from what the process holds now
    before = status_kib("VmRSS")
    start = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        logq = next_byte_logps(logits, symbols) if path == "lean" else symbol_logps(torch.log_softmax(logits, -1),
                                                                                   symbols)  # [R, C, 258]
    (torch.where(torch.isfinite(logq), logq, torch.zeros_like(logq)) * weights).sum().backward()
    seconds = time.perf_counter() - start
    return {"path": path, "saved_bytes": sum(saved.values()), "peak_above_mib": (status_kib("VmHWM") - before) / 1024,
            "seconds": seconds, "logits_mib": logits.numel() * 4 / 2**20}


def in_fresh_process(path: str, args: argparse.Namespace) -> dict:
    done = subprocess.run([sys.executable, __file__, "--one", path, "--vocab", str(args.vocab), "--rows",
                           str(args.rows), "--completion", str(args.completion)], capture_output=True, text=True,
                          env=os.environ, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the {path} run failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=151936, help="vocabulary width (Qwen2.5's: 151936)")
    parser.add_argument("--rows", type=int, default=2, help="taught rows in the micro-batch")
    parser.add_argument("--completion", type=int, default=256, help="completion tokens per row")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per path, alternating")
    parser.add_argument("--one", choices=PATHS, help=argparse.SUPPRESS)  # one measurement, in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.vocab, args.rows, args.completion)))
        return
    runs = [in_fresh_process(path, args) for _ in range(args.rounds) for path in PATHS]
    by_path = {path: [run for run in runs if run["path"] == path] for path in PATHS}
    median = {path: {key: statistics.median(run[key] for run in by_path[path])
                     for key in ("saved_bytes", "peak_above_mib", "seconds")} for path in PATHS}
    lean, plain = median["lean"], median["composition"]
    print(json.dumps({"vocab": args.vocab, "rows": args.rows, "completion": args.completion, "rounds": args.rounds,
                      "logits_mib": runs[0]["logits_mib"], "median": median,
                      "lean_over_composition": {key: lean[key] / plain[key] for key in lean},
                      "runs": runs}, indent=1))


if __name__ == "__main__":
    main()

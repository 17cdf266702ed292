"""SEE bandwidth: one training step's exchange at the paper's scale, against raw file I/O.

Per step and policy the paper generates 1024 prompts x 5 rollouts with responses up to
3072 tokens. Response lengths here are drawn uniformly from [--min-len, --max-len]
(default [256, 3072]; mean 1664 tokens), each token spanning 1-7 characters of text,
with token ids, spans, behaviour log-probs, rewards and advantages, i.e. every column a
PRP step publishes.

For M policies, M processes run the real per-step pattern concurrently: each publishes
its shard (Arrow IPC, fsync, atomic renames, xxh3_128 while writing), waits at the
SEE barrier for all M, then reads every peer's shard (memory-mapped, checksum verified).
The reference, in the same run on the same disk and interleaved step by step, is plain
sequential file I/O of the same byte counts with the same pattern: each process writes
its shard's byte count (one buffer, fsync), meets the others at an in-memory barrier,
then reads every peer's file into a preallocated buffer. Reads are served by the page
cache in both (the files were just written; that is also the real pattern on one node).
One untimed warm-up step of each comes first; timed steps alternate which side runs first.

Prints one JSON object per M (medians over --steps):
    {"M", "bytes_per_policy", "see_s_per_step", "raw_s", "fraction_of_raw", ...}
where fraction_of_raw = raw_s / see_s_per_step (1.0 = as fast as raw I/O; target >= 0.5).
publish_fraction_of_raw_write and read_fraction_of_raw_read split it into its two halves.
build_s is the time to validate one policy's batch as a table from outside (RolloutBatch.from_table); since the
SEE record layout v2 the trainer's own batches are not re-validated, and each reader validates every peer shard
once, inside see_s_per_step.

Usage:
    python benchmarks/see_bandwidth.py                      # paper scale, M = 2 and 4
    python benchmarks/see_bandwidth.py --prompts 16 --max-len 128 --steps 1   # smoke
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # see_synthetic: the tests' batches

def worker(index: int, m: int, args: argparse.Namespace, root: str, barrier, results) -> None:  # noqa: ANN001
    from mutualrl.see import ExperienceExchange, RolloutBatch
    from see_synthetic import synthetic_batch

    policies = [f"policy{i}" for i in range(m)]
    me = policies[index]
    batch = synthetic_batch(
        args.prompts, args.rollouts, min(args.min_len, args.max_len), args.max_len, seed=1000 + index
    )
    t0 = time.perf_counter()  # building + validating a RolloutBatch from ready columns (zero-copy ragged)
    RolloutBatch.from_table(batch.to_table())
    build_s = time.perf_counter() - t0
    exchange = ExperienceExchange(
        Path(root) / "see", run_id="bench", policy=me, policies=policies, poll_interval_s=args.poll_interval
    )
    raw_dir = Path(root) / "raw"
    raw_dir.mkdir(exist_ok=True)

    def see_step(step: int) -> dict:
        """Publish, barrier, read every peer with checksum verification."""
        barrier.wait()
        t0 = time.perf_counter()
        data_path = exchange.publish(step, batch)
        t1 = time.perf_counter()
        shards = exchange.wait_for(step)
        tables = {p: exchange.read(step, p) for p in exchange.peers}
        t2 = time.perf_counter()
        rows_read = sum(t.num_rows for t in tables.values())
        del tables
        barrier.wait()
        for info in shards[me]:
            info.manifest_path.unlink()
            info.data_path.unlink()
        return {
            "see_s": t2 - t0,
            "see_publish_s": t1 - t0,
            "see_barrier_read_s": t2 - t1,
            "bytes": shards[me][0].bytes,
            "rows_read": rows_read,
        }

    def raw_step(step: int, payload: bytes, read_buffer: bytearray) -> dict:
        """The same bytes with the same pattern: plain write + fsync, barrier, plain reads."""
        mine = raw_dir / f"{me}-{step}.bin"
        barrier.wait()
        r0 = time.perf_counter()
        fd = os.open(mine, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view[: 1 << 26]) :]
        os.fsync(fd)
        os.close(fd)
        r1 = time.perf_counter()
        barrier.wait()  # stands in for the SEE barrier (in memory: free)
        r2 = time.perf_counter()
        raw_read = 0
        for peer in policies:
            if peer != me:
                with open(raw_dir / f"{peer}-{step}.bin", "rb", buffering=0) as fh:
                    raw_read += fh.readinto(read_buffer)
        r3 = time.perf_counter()
        barrier.wait()
        mine.unlink()
        return {"raw_s": (r1 - r0) + (r3 - r2), "raw_write_s": r1 - r0, "raw_read_s": r3 - r2, "raw_bytes_read": raw_read}

    # Untimed warm-up step of each (first-call costs; learns the shard size).
    nbytes = see_step(0)["bytes"]
    payload = np.random.default_rng(index).integers(0, 256, size=nbytes, dtype=np.uint8).tobytes()
    # Preallocated and touched outside the timing, so raw reads pay for I/O only.
    read_buffer = bytearray(os.urandom(16)) * (2 * nbytes // 16 + 1)
    raw_step(0, payload, read_buffer)
    out = []
    for step in range(1, args.steps + 1):
        # Alternate the order so neither side always runs right after the other's writes.
        if step % 2:
            row = see_step(step)
            row.update(raw_step(step, payload, read_buffer))
        else:
            row = raw_step(step, payload, read_buffer)
            row.update(see_step(step))
        out.append(row)
    results.put((index, build_s, batch.num_rows, int(np.sum(batch.ragged("response_token_ids").lengths)), out))


def _ratio(raw: list[float], see: list[float]) -> float | None:
    see_s = statistics.median(see)
    return round(statistics.median(raw) / see_s, 3) if see_s > 0 else None


def run(m: int, args: argparse.Namespace) -> dict:
    ctx = mp.get_context("spawn")
    root = tempfile.mkdtemp(prefix=f"see-bench-M{m}-", dir=args.dir)
    try:
        barrier = ctx.Barrier(m)
        results = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(i, m, args, root, barrier, results)) for i in range(m)]
        for p in procs:
            p.start()
        gathered = [results.get() for _ in procs]
        for p in procs:
            p.join()
            if p.exitcode != 0:
                raise SystemExit(f"benchmark worker exited with code {p.exitcode}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    gathered.sort(key=lambda g: g[0])
    steps = range(args.steps)  # timed steps (after one untimed warm-up step)
    # A step takes as long as its slowest process (all start at the same barrier).
    def per_step(key: str) -> list[float]:
        return [max(g[4][s][key] for g in gathered) for s in steps]

    see_s = statistics.median(per_step("see_s"))
    raw_s = statistics.median(per_step("raw_s"))
    bytes_per_policy = int(statistics.mean(g[4][0]["bytes"] for g in gathered))
    return {
        "M": m,
        "prompts": args.prompts,
        "rollouts": args.rollouts,
        "len_range": [min(args.min_len, args.max_len), args.max_len],
        "rows_per_policy": gathered[0][2],
        "tokens_per_policy": int(statistics.mean(g[3] for g in gathered)),
        "bytes_per_policy": bytes_per_policy,
        "steps": args.steps,
        "see_s_per_step": round(see_s, 4),
        "see_publish_s": round(statistics.median(per_step("see_publish_s")), 4),
        "see_barrier_read_s": round(statistics.median(per_step("see_barrier_read_s")), 4),
        "raw_s": round(raw_s, 4),
        "raw_write_s": round(statistics.median(per_step("raw_write_s")), 4),
        "raw_read_s": round(statistics.median(per_step("raw_read_s")), 4),
        "fraction_of_raw": round(raw_s / see_s, 3) if see_s > 0 else None,
        # The two halves separately: publish vs write+fsync, and barrier+verified read vs read().
        "publish_fraction_of_raw_write": _ratio(per_step("raw_write_s"), per_step("see_publish_s")),
        "read_fraction_of_raw_read": _ratio(per_step("raw_read_s"), per_step("see_barrier_read_s")),
        "build_s": round(statistics.median(g[1] for g in gathered), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=1024, help="prompts per step (paper: 1024)")
    parser.add_argument("--rollouts", type=int, default=5, help="rollouts per prompt (paper: 5)")
    parser.add_argument("--min-len", type=int, default=256, help="shortest response, tokens")
    parser.add_argument("--max-len", type=int, default=3072, help="longest response, tokens (paper: 3072)")
    parser.add_argument("--policies", type=int, nargs="+", default=[2, 4], help="values of M to run")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per M after a warm-up (median reported)")
    parser.add_argument("--poll-interval", type=float, default=0.02, help="SEE barrier poll interval cap, s")
    parser.add_argument("--dir", default=None, help="folder on the disk to measure (default: the temp folder)")
    args = parser.parse_args(argv)
    print(
        f"# SEE bandwidth: {args.prompts} prompts x {args.rollouts} rollouts per policy, response lengths "
        f"uniform in [{min(args.min_len, args.max_len)}, {args.max_len}] tokens, M in {args.policies}, "
        f"{args.steps} step(s), disk of {args.dir or tempfile.gettempdir()}",
        file=sys.stderr,
    )
    for m in args.policies:
        print(json.dumps(run(m, args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

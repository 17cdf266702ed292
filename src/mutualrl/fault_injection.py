"""Fault injection for tests and benchmarks: the one place the product asks whether to fail on purpose.

Each hook is an environment variable, since the faults are injected into processes a test or a benchmark
starts (the launcher, its workers); within one process a test monkeypatches instead. None is a setting:
unset, every hook is a no-op. The product calls them at named points:

- :func:`disk_full` before a write (``atomic_io``'s writes and appends, SEE shards, checkpoints, trackers' and
  plots' folders, the asset cache): :data:`DISK_FULL_ENV`;
- :func:`step_delay` once per worker, for the trainer's sleep before each generation: :data:`STEP_DELAY_ENV`;
- :func:`vllm_sync_skipped` where a CPU vLLM engine would take the trainer's weights: :data:`VLLM_NO_SYNC_ENV`;
- :func:`save_delay` in a worker's checkpoint save, before its manifest: :data:`SAVE_DELAY_ENV`;
- :func:`stop_grace` where the launcher plans the wait for a stop that saves: :data:`STOP_GRACE_ENV`.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

DISK_FULL_ENV = "MUTUALRL_DEBUG_DISK_FULL"
"""``text[@n]``: the n-th (default first) write of this process to a path containing ``text`` fails with
ENOSPC, as on a full disk; that write and the later ones to matching paths (tests, ``benchmarks/chaos.py``)."""

STEP_DELAY_ENV = "MUTUALRL_DEBUG_STEP_DELAY"
"""``policy=seconds[@even|@odd][,...]``: a sleep added to each generation (or only those at even / odd
steps) of the named policies, to make a slow or a jittery peer on purpose (benchmarks/async_exchange.py;
a skipped round generates nothing, so it sleeps not). It changes wall time only, never results
(:meth:`~mutualrl.training.trainer.MutualGRPOTrainer.throttle`)."""

VLLM_NO_SYNC_ENV = "MUTUALRL_DEBUG_VLLM_NO_SYNC"
"""``1`` (every policy) or ``policy[,...]`` (the named ones) leaves a CPU vLLM engine on its initial weights (tests
check that the log-prob gap then grows, beside a policy whose engine is synced)."""

SAVE_DELAY_ENV = "MUTUALRL_DEBUG_SAVE_DELAY"
"""``policy=seconds[,...]``: a sleep in each checkpoint save of the named policies, after the files and before the
manifest that makes the checkpoint count (a slow filesystem on purpose: a worker killed in it leaves no usable
checkpoint). It changes wall time only (:meth:`~mutualrl.training.trainer.MutualGRPOTrainer._save_checkpoint`)."""

STOP_GRACE_ENV = "MUTUALRL_DEBUG_STOP_GRACE"
"""``floor_s,write_gib_per_s``: the launcher's floor and checkpoint write rate for the wait after a stop signal
(:mod:`mutualrl.launch.supervise.stop_grace`), so a test exercises the same arithmetic with seconds, not minutes."""

_matching_writes = 0


def disk_full(path: str | Path) -> None:
    """Raise ENOSPC for ``path`` when :data:`DISK_FULL_ENV` says so."""
    global _matching_writes
    spec = os.environ.get(DISK_FULL_ENV, "")
    text, _, nth = spec.rpartition("@") if "@" in spec else (spec, "", "1")
    if not text or text not in str(path):
        return
    _matching_writes += 1
    if _matching_writes >= int(nth or 1):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def step_delay(policy: str, spec: str | None = None) -> tuple[float, str | None]:
    """(seconds, parity) :data:`STEP_DELAY_ENV` (or ``spec``) gives ``policy``: ``(0.0, None)`` when it names none."""
    for item in (os.environ.get(STEP_DELAY_ENV, "") if spec is None else spec).split(","):
        name, _, value = item.partition("=")
        if name.strip() == policy and value.strip():
            seconds, _, parity = value.strip().partition("@")
            if parity not in ("", "even", "odd"):
                raise ValueError(f"{STEP_DELAY_ENV}: {item!r}: write policy=seconds, policy=seconds@even or @odd")
            return float(seconds), parity or None
    return 0.0, None


def save_delay(policy: str) -> float:
    """Seconds :data:`SAVE_DELAY_ENV` gives ``policy``'s checkpoint saves (0.0: none)."""
    for item in os.environ.get(SAVE_DELAY_ENV, "").split(","):
        name, _, value = item.partition("=")
        if name.strip() == policy and value.strip():
            return float(value)
    return 0.0


def stop_grace() -> tuple[float, float] | None:
    """(floor seconds, write GiB/s) :data:`STOP_GRACE_ENV` gives the launcher, or None when unset."""
    spec = os.environ.get(STOP_GRACE_ENV, "")
    if not spec:
        return None
    floor, _, rate = spec.partition(",")
    if not rate.strip() or float(rate) <= 0:
        raise ValueError(f"{STOP_GRACE_ENV}: {spec!r}: write floor_s,write_gib_per_s (a rate above 0)")
    return float(floor), float(rate)


def vllm_sync_skipped(policy: str) -> bool:
    """Whether :data:`VLLM_NO_SYNC_ENV` asks to leave ``policy``'s vLLM engine on its initial weights."""
    spec = os.environ.get(VLLM_NO_SYNC_ENV, "")
    return spec == "1" or policy in {name.strip() for name in spec.split(",")}

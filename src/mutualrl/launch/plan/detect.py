"""What this machine has: GPUs and their memory, CPU cores, RAM (MWRA's inputs when nothing is simulated)."""

from __future__ import annotations

import os


def detect_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def detect_gpu_memory_gib(gpus: int) -> float | None:
    """The smallest total memory among the first ``gpus`` visible GPUs."""
    if gpus <= 0:
        return None
    import torch

    return min(torch.cuda.get_device_properties(i).total_memory for i in range(gpus)) / 2**30


def detect_cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def detect_ram_gib() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return None



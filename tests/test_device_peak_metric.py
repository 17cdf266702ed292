"""The worker's per-row GPU peak (``gpu/peak_allocated_gib``): torch's allocator peak since the row before, reset after
each read; nothing on a CPU."""

from __future__ import annotations

import torch

from mutualrl.training import callbacks


def test_no_peak_on_a_cpu():
    assert not torch.cuda.is_available()
    assert callbacks.device_peak_gib() is None


def test_the_peak_since_the_row_before_is_read_and_reset(monkeypatch):
    allocator = {"peak": 3 * 2**30, "resets": 0}

    def reset() -> None:
        allocator["peak"], allocator["resets"] = 0, allocator["resets"] + 1

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: allocator["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    assert callbacks.device_peak_gib() == 3.0 and allocator["resets"] == 1
    allocator["peak"] = 2**29
    assert callbacks.device_peak_gib() == 0.5 and allocator["resets"] == 2

"""The GPU set resolved for real, against the registry's own metadata for the target (Linux x86_64, CPython 3.11),
through pip's configured index: the committed requirements-gpu.txt resolves, to exactly itself, and the CPU lock's
apache-tvm-ffi line put back into it does not. A tier of its own (minutes of downloads of metadata): .ci/run runs it
when setup.sh, pyproject.toml, a lock or the resolver changed since it last passed (``.ci/gpu_lock.py digest``); by
hand: ``pytest -m gpu_lock_resolution``."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpu_lock_module import ROOT, load_gpu_lock

pytestmark = [pytest.mark.gpu_lock_resolution, pytest.mark.slow]
gpu_lock = load_gpu_lock()


def test_the_committed_gpu_lock_resolves_against_the_registry_to_itself():
    done = subprocess.run([sys.executable, str(ROOT / ".ci" / "gpu_lock.py"), "check"], capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resolves to requirements-gpu.txt" in done.stdout


def test_the_cpu_locks_lines_set_aside_do_not_resolve_in_the_gpu_set():
    """The lines requirements-gpu.json says the GPU set had to leave (vLLM's apache-tvm-ffi pin today) really make
    pip's resolution for the target impossible."""
    record = __import__("json").loads((ROOT / "requirements-gpu.json").read_text())
    cpu = gpu_lock.read_pins(ROOT / "requirements-tested.txt")
    set_aside = record["set_aside_from_cpu_lock"]
    assert set_aside, "nothing set aside: this test would check nothing (drop it with the record's field)"
    lock = {**gpu_lock.read_pins(ROOT / "requirements-gpu.txt"), **{name: cpu[name] for name in set_aside}}
    with tempfile.TemporaryDirectory() as work, pytest.raises(SystemExit) as refused:
        gpu_lock.resolve(lock, Path(work))
    assert "could not resolve" in str(refused.value) and any(name in str(refused.value) for name in set_aside)

"""``.ci/gpu_lock.py`` (the GPU lock's resolver, outside the package) loaded as a module for the tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_gpu_lock():
    """The module, loaded once from its file (it is a script of .ci/, not an importable package)."""
    if "gpu_lock" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gpu_lock", ROOT / ".ci" / "gpu_lock.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["gpu_lock"] = module
        spec.loader.exec_module(module)
    return sys.modules["gpu_lock"]

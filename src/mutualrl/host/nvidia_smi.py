"""What ``nvidia-smi`` says of this machine's GPUs and driver, next to what torch sees.

torch finds no GPU where its build needs a newer driver than the machine's (the registry's torch 2.13 is a CUDA 13
build: an R580 driver or newer) or where it is a CPU build; ``nvidia-smi`` still lists the cards. A plan that
trusted torch alone would train the pool on the CPU without a word, so the plan asks both and refuses when they
disagree (:func:`torch_misses_gpus`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from mutualrl.host.cuda_driver import MINIMUM_DRIVER, parse_nvidia_smi

NVIDIA_SMI_TIMEOUT_S = 20.0
"""A hung driver makes ``nvidia-smi`` wait; the plan does not wait for it longer than this."""

@dataclass(frozen=True)
class DriverReport:
    """``nvidia-smi``'s GPUs and driver."""

    gpus: list[str]
    """One name per GPU, in ``nvidia-smi -L`` order."""
    driver: str | None
    """The driver version (``550.54.15``); None where the output did not say."""
    cuda: str | None
    """The newest CUDA version the driver runs (``12.4``); None where the output did not say."""
    uuids: tuple[str, ...] = ()
    """The GPUs' and MIG devices' UUIDs (``GPU-...``, ``MIG-...``) that ``nvidia-smi -L`` printed."""

    def describe(self) -> str:
        """``8 GPUs (driver 550.54.15, CUDA 12.4)``."""
        about = ", ".join(part for part in (self.driver and f"driver {self.driver}",
                                            self.cuda and f"CUDA {self.cuda}") if part)
        return f"{len(self.gpus)} GPU{'s' if len(self.gpus) != 1 else ''}" + (f" ({about})" if about else "")


GPU_LINE = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: [^)]*\))?\s*$")


def parse_gpu_list(text: str) -> list[str]:
    """The GPU names of ``nvidia-smi -L``'s output (``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)`` a line)."""
    return [match.group(2) for line in text.splitlines() if (match := GPU_LINE.match(line.strip()))]


UUID = re.compile(r"\(UUID: ([^)\s]+)\)")


def parse_uuids(text: str) -> tuple[str, ...]:
    """Every ``(UUID: ...)`` of ``nvidia-smi -L``'s output, GPUs' and MIG devices' alike."""
    return tuple(UUID.findall(text))


def parse_header(text: str) -> tuple[str | None, str | None]:
    """(driver version, CUDA version) of plain ``nvidia-smi``'s header line (read by :mod:`.cuda_driver`)."""
    driver = parse_nvidia_smi(text)
    cuda = driver.cuda_version
    return driver.driver_version, (f"{cuda[0]}.{cuda[1]}" if cuda else None)


def _output(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def read_driver() -> DriverReport | None:
    """``nvidia-smi``'s report (None: no ``nvidia-smi`` on PATH, or it failed: no driver to speak of)."""
    program = shutil.which("nvidia-smi")
    if program is None:
        return None
    listing = _output([program, "-L"])
    if listing is None:
        return None
    driver, cuda = parse_header(_output([program]) or "")
    return DriverReport(parse_gpu_list(listing), driver, cuda, parse_uuids(listing))


def names_a_device(entry: str, report: DriverReport) -> bool:
    """``entry`` of ``CUDA_VISIBLE_DEVICES`` is one of ``report``'s devices: an index below its count, or a UUID (or
    a UUID's prefix, as CUDA accepts) it lists. A UUID is taken as valid where the listing printed none."""
    if entry.isdigit():
        return int(entry) < len(report.gpus)
    if entry.startswith(("GPU-", "MIG-")):
        return not report.uuids or any(uuid.startswith(entry) for uuid in report.uuids)
    return False


def hides_gpus(report: DriverReport, environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """``CUDA_VISIBLE_DEVICES`` leaves torch no device of ``report``'s: a CPU run asked for on purpose.

    CUDA reads the list up to its first entry that names no device, so the list hides every GPU exactly when its
    first entry names none: empty, ``-1``, ``-1,0``, ``NoDevFiles`` (set by some schedulers), an index past the last
    GPU, a UUID not listed."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    return value is not None and not names_a_device(value.split(",")[0].strip(), report)


def driver_major(driver: str | None) -> int | None:
    try:
        return int(str(driver).split(".")[0])
    except ValueError:
        return None


CPU_ON_PURPOSE = "; --gpus 0 (or CUDA_VISIBLE_DEVICES= mutualrl train ...) trains on the CPU on purpose"
"""How a run on a GPU box is placed on the CPU on purpose, as every line of :func:`torch_misses_gpus` ends."""


def torch_misses_gpus(report: DriverReport | None, torch_version: str, torch_cuda: str | None,
                      needed_by: str = "") -> str | None:
    """One line saying why torch sees none of the GPUs ``nvidia-smi`` lists, and what to do (None: it lists none).

    ``torch_cuda``: the CUDA version torch was built for (``torch.version.cuda``; None: a CPU build).
    ``needed_by``: what in the run needs a GPU (``vLLM, DeepSpeed zero3``), said after "sees none".
    """
    if report is None or not report.gpus:
        return None
    said = f"nvidia-smi lists {report.describe()} but torch {torch_version} sees none" + (
        f" and the run needs GPUs ({needed_by})" if needed_by else "")
    on_purpose = CPU_ON_PURPOSE
    if torch_cuda is None:
        return (f"{said}: it is a CPU build; install a CUDA build of torch for this driver"
                f"{f' (CUDA {report.cuda} or older)' if report.cuda else ''}{on_purpose}")
    built_major = driver_major(torch_cuda)
    needed = MINIMUM_DRIVER.get(built_major or 0)
    have = driver_major(report.driver)
    if needed is not None and have is not None and have < needed:
        return (f"{said}: the torch build is for CUDA {torch_cuda}, which needs driver R{needed} or newer; install a "
                f"newer driver, or a torch (and vLLM) built for CUDA {report.cuda or 'this driver'} from PyTorch's own "
                f"index{on_purpose}")
    return (f"{said} (a CUDA {torch_cuda} build): check the driver with nvidia-smi and `python -c \"import torch; "
            f"torch.cuda.init()\"`{on_purpose}")

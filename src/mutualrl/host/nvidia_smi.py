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

    def describe(self) -> str:
        """``8 GPUs (driver 550.54.15, CUDA 12.4)``."""
        about = ", ".join(part for part in (self.driver and f"driver {self.driver}",
                                            self.cuda and f"CUDA {self.cuda}") if part)
        return f"{len(self.gpus)} GPU{'s' if len(self.gpus) != 1 else ''}" + (f" ({about})" if about else "")


GPU_LINE = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: [^)]*\))?\s*$")


def parse_gpu_list(text: str) -> list[str]:
    """The GPU names of ``nvidia-smi -L``'s output (``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)`` a line)."""
    return [match.group(2) for line in text.splitlines() if (match := GPU_LINE.match(line.strip()))]


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
    return DriverReport(parse_gpu_list(listing), driver, cuda)


def hides_gpus(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """``CUDA_VISIBLE_DEVICES`` set to no device (empty, ``-1``): a CPU run asked for on purpose."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    return value is not None and value.strip() in ("", "-1")


def driver_major(driver: str | None) -> int | None:
    try:
        return int(str(driver).split(".")[0])
    except ValueError:
        return None


def torch_misses_gpus(report: DriverReport | None, torch_version: str, torch_cuda: str | None) -> str | None:
    """One line saying why torch sees none of the GPUs ``nvidia-smi`` lists, and what to do (None: it lists none).

    ``torch_cuda``: the CUDA version torch was built for (``torch.version.cuda``; None: a CPU build).
    """
    if report is None or not report.gpus:
        return None
    said = f"nvidia-smi lists {report.describe()} but torch {torch_version} sees none"
    on_purpose = "; CUDA_VISIBLE_DEVICES= mutualrl train ... trains on the CPU on purpose"
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

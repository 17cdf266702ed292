"""What this machine has: GPUs and their memory, CPU cores, RAM (MWRA's inputs when nothing is simulated)."""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path

from mutualrl.config.schema import RunConfig
from mutualrl.errors import PlacementError, UsageError


def torch_is_cpu_build() -> bool:
    """The installed torch is a CPU-only build (its version says ``+cpu``): it sees no GPU, whatever the machine
    has. Read from the package's metadata, so a launcher on a CPU box never imports torch (about 2 s)."""
    try:
        return importlib.metadata.version("torch").endswith("+cpu")
    except importlib.metadata.PackageNotFoundError:
        return False


def detect_gpus() -> int:
    if torch_is_cpu_build():
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def torch_build() -> tuple[str, str | None]:
    """(torch's version, the CUDA version it was built for; None: a CPU build), a CPU build read from its metadata."""
    if torch_is_cpu_build():
        return importlib.metadata.version("torch"), None
    import torch

    return str(torch.__version__), torch.version.cuda


def refuse_unseen_gpus() -> None:
    """Torch sees no GPU: refuse in one line where ``nvidia-smi`` lists some (a driver older than the torch build, a
    CPU build on a GPU box), unless ``CUDA_VISIBLE_DEVICES`` hides them on purpose."""
    from mutualrl.host.nvidia_smi import hides_gpus, read_driver, torch_misses_gpus

    if hides_gpus():
        return
    report = read_driver()
    if report is None or not report.gpus:
        return
    problem = torch_misses_gpus(report, *torch_build())
    if problem:
        raise PlacementError(problem)


def detect_gpu_memory_gib(gpus: int) -> float | None:
    """The smallest total memory among the first ``gpus`` visible GPUs."""
    if gpus <= 0:
        return None
    import torch

    return min(torch.cuda.get_device_properties(i).total_memory for i in range(gpus)) / 2**30


def detect_gpu_name() -> str | None:
    """The first visible GPU's name (``NVIDIA H100 80GB HBM3``), where torch can say it."""
    try:
        import torch

        return str(torch.cuda.get_device_name(0))
    except (RuntimeError, AssertionError, ImportError):
        return None


def detect_cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def detect_ram_gib() -> float | None:
    """The machine's RAM, or less where this process's cgroup is limited to less (a Slurm task's ``--mem``, a
    container's limit: what the kernel kills the run at)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return None
    limit = cgroup_memory_limit_gib()
    return physical if limit is None else min(physical, limit)


UNLIMITED_BYTES = 2**60
"""cgroup v1 writes "no limit" as a number near 2^63."""


def cgroup_memory_limit_gib(proc_cgroup: Path = Path("/proc/self/cgroup"),
                            root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The smallest memory limit of this process's cgroup and its ancestors (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``); None when none is set or none can be read."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits: list[int] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            base, name = root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        folder = base / path.strip("/")
        while True:
            try:
                text = (folder / name).read_text().strip()
            except OSError:
                text = ""
            if text.isdigit() and int(text) < UNLIMITED_BYTES:
                limits.append(int(text))
            if folder == base or base not in folder.parents:
                break
            folder = folder.parent
    return min(limits) / 2**30 if limits else None


def free_disk_gib(path: Path) -> tuple[float | None, str]:
    """(free GiB for this user, the existing folder it was measured at) of the filesystem ``path`` will be on:
    measured at its nearest existing parent, since a new run folder does not exist yet."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        stats = os.statvfs(probe)
    except OSError:
        return None, str(probe)
    return stats.f_bavail * stats.f_frsize / 2**30, str(probe)


@dataclass(frozen=True)
class Node:
    """What planning knows of one machine: given, detected, or (simulated) left unknown."""

    gpus: int
    cpu_cores: int
    gpu_memory_gib: float | None
    ram_gib: float | None
    visible_devices: str | None
    """The parent's CUDA_VISIBLE_DEVICES as the commands should see it (None: read it from the environment)."""
    gpu_name: str | None = None
    """The first GPU's name, as torch reports it (None: simulated, or no GPU)."""


def this_node(
    config: RunConfig,
    gpus: int | None,
    simulate: bool,
    cpu_cores: int | None,
    gpu_memory_gib: float | None,
    ram_gib: float | None,
    parent_visible_devices: str | None,
) -> Node:
    """Check ``--machine-rank`` and ``--gpus``, and detect what was not given (nothing when ``simulate``)."""
    launch = config.launch
    if launch.machine_rank >= launch.nodes:
        raise UsageError(f"--machine-rank {launch.machine_rank} is not a machine of --nodes {launch.nodes} "
                         f"(0..{launch.nodes - 1})")
    if gpus is None:
        gpus = launch.gpus
    if gpus is None:
        gpus = 0 if simulate else detect_gpus()
        if gpus == 0 and not simulate:
            refuse_unseen_gpus()
    elif not simulate:
        visible = detect_gpus()
        if gpus > visible == 0:
            refuse_unseen_gpus()
        if gpus > visible:
            raise PlacementError(
                f"--gpus {gpus} asks for more GPUs than are visible ({visible}); lower --gpus, or add --dry-run "
                f"to simulate a bigger node"
            )
    if cpu_cores is None:
        cpu_cores = detect_cpu_cores()
    if gpu_memory_gib is None:
        gpu_memory_gib = launch.gpu_memory_gib  # --gpu-memory: the card a simulated (or this) node has
    if ram_gib is None:
        ram_gib = launch.ram_gib  # --ram: the RAM a simulated (or this) node has
    if simulate and parent_visible_devices is None:
        parent_visible_devices = ""  # a simulated node's ids are not this machine's CUDA_VISIBLE_DEVICES
    if not simulate:
        gpu_memory_gib = gpu_memory_gib if gpu_memory_gib is not None else detect_gpu_memory_gib(gpus)
        ram_gib = ram_gib if ram_gib is not None else detect_ram_gib()
    name = detect_gpu_name() if gpus > 0 and not simulate else None
    return Node(gpus, cpu_cores, gpu_memory_gib, ram_gib, parent_visible_devices, name)

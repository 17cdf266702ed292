"""`mutualrl doctor`: what this machine has for a run, each line OK / missing with the fix.

Run it before a long job. Each :class:`Check` is one fact (a version, a device, a free-disk
figure) with a status: ``ok``; ``warn`` (optional, or fine for the tiny pool but not for
the paper pools); ``fail`` (the default tiny pool cannot run). Nothing is installed or
downloaded; the hub check is one HEAD request with a short timeout.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HUB_TIMEOUT_S = 3.0
MIN_FREE_GIB = 20.0  # a paper-scale run folder: checkpoints of two 1.5B-4B policies, SEE, logs
COMMON_TRACKERS = ("tensorboard", "wandb", "trackio", "mlflow")  # the ones TRL users reach for


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok" | "warn" | "fail"
    detail: str
    fix: str = ""
    info: dict[str, Any] | None = None  # machine-readable facts (--json), e.g. the vLLM build

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.info is None:
            out.pop("info")
        return out


def version_of(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_torch() -> list[Check]:
    try:
        import torch
    except ImportError as err:
        return [Check("torch", "fail", f"does not import ({err})", "run ./setup.sh (CPU) or install PyTorch for "
                      "your CUDA version following PyTorch's own instructions, then ./setup.sh")]
    checks = [Check("torch", "ok", f"{torch.__version__}")]
    if not torch.cuda.is_available():
        checks.append(Check("cuda", "warn", "no CUDA device: the tiny pool runs on the CPU; the paper pools need GPUs",
                            "on a GPU machine install a CUDA build of torch (PyTorch's install instructions)"))
        return checks
    count = torch.cuda.device_count()
    memory = [torch.cuda.get_device_properties(i).total_memory / 2**30 for i in range(count)]
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else "unknown"
    checks.append(Check("cuda", "ok", f"CUDA {torch.version.cuda}, NCCL {nccl}, {count} GPU(s): "
                        + ", ".join(f"{torch.cuda.get_device_name(i)} {m:.0f} GiB" for i, m in enumerate(memory))))
    return checks


def check_c_compiler() -> Check | None:
    """A C compiler and Python's headers where TRL's Triton kernels run: on a CUDA GPU its fused log-prob head
    (``trl/kernels/chunked_logprob.py``) is a Triton kernel, and Triton builds a small C launcher at its first call
    with ``$CC``, else ``gcc``, else ``clang`` (``triton/runtime/build.py``), against ``Python.h``; without them
    the first training step fails ("Failed to find C compiler"). None where no Triton kernel runs."""
    import sysconfig

    import torch
    from transformers.utils import is_triton_available

    if not (torch.cuda.is_available() and is_triton_available()):
        return None
    named = (os.environ.get("CC") or "").strip()
    compiler = shutil.which(named.split()[0]) if named else shutil.which("gcc") or shutil.which("clang")
    scheme = sysconfig.get_default_scheme()
    headers = Path(sysconfig.get_paths(scheme="posix_prefix" if scheme == "posix_local" else scheme)["include"])
    missing = [what for what, found in ((f"a C compiler (CC={named})" if named else "a C compiler (gcc or clang)",
                                         compiler), (f"Python's headers ({headers / 'Python.h'})",
                                                     (headers / "Python.h").is_file())) if not found]
    if missing:
        return Check("c-compiler", "fail", f"{' and '.join(missing)} not found: TRL's Triton log-prob kernel builds "
                     "its launcher at the first training step on this GPU and fails there",
                     "install gcc and the Python development headers (Debian/Ubuntu: apt-get install gcc "
                     "python3-dev), or set CC to a C compiler")
    return Check("c-compiler", "ok", f"{compiler} and {headers / 'Python.h'} (TRL's Triton kernels build with them)")


def check_module(name: str, module: str, fix: str, needed_for: str) -> Check:
    """An optional package: ok with its version, else warn with what it is needed for."""
    try:
        with contextlib.redirect_stdout(sys.stderr):  # some (DeepSpeed) log to stdout on import: keep --json clean
            importlib.import_module(module)
    except ModuleNotFoundError:
        return Check(name, "warn", f"not installed; needed for {needed_for}", fix)
    except Exception as err:  # noqa: BLE001 - a broken install (e.g. a CUDA build without CUDA) is reported
        return Check(name, "warn", f"installed but does not import ({type(err).__name__}: {str(err)[:120]}); "
                     f"needed for {needed_for}", fix)
    return Check(name, "ok", version_of(name) or "installed")


VLLM_PROBE = ("import json, vllm; from vllm.platforms import current_platform as p; "
               "print(json.dumps({'device': p.device_type}))")


def check_vllm(timeout_s: float = 120.0) -> Check:
    """Which vLLM build is installed and whether it can generate here (imported in a child process:
    importing vllm takes seconds and changes process-global state)."""
    import json
    import subprocess

    import torch

    from mutualrl.host.vllm_cpu import CPU_BUILD, cpu_blocker, installed_build

    build = installed_build()
    gpu = torch.cuda.is_available()
    info: dict[str, Any] = {"build": build.to_dict(), "usable": False, "device": None}
    needed = "fast generation (the paper recipes' use_vllm)"
    if not build.installed:
        fix = "pip install -e '.[vllm]'" if gpu else f"./setup.sh --suite (installs {CPU_BUILD})"
        return Check("vllm", "warn", f"not installed; needed for {needed}", fix, info)
    blocker = None if gpu and not build.cpu else cpu_blocker(build)
    if blocker is not None:
        return Check("vllm", "warn", f"{build.describe()}: cannot run here: {blocker}", "", info)
    try:
        probe = subprocess.run([sys.executable, "-c", VLLM_PROBE], capture_output=True, text=True, timeout=timeout_s)
        device = json.loads(probe.stdout.strip().splitlines()[-1])["device"] if probe.returncode == 0 else None
    except (subprocess.TimeoutExpired, ValueError, IndexError, KeyError):
        device, probe = None, None
    if device is None:
        tail = (probe.stderr.strip().splitlines() or ["no output"])[-1][:160] if probe is not None else "timed out"
        return Check("vllm", "warn", f"{build.describe()}: does not import ({tail})", "", info)
    info.update(usable=True, device=device)
    where = "on the CPU (colocate mode: one engine per policy rank)" if device == "cpu" else f"on {device}"
    return Check("vllm", "ok", f"{build.describe()}: usable {where}", "", info)


def check_tested_versions() -> Check:
    """TRL and vLLM against the tested series: an untested TRL fails (training refuses it), an untested vLLM
    warns (only runs that generate with it refuse); the override turns both into warnings."""
    from mutualrl.versions import OVERRIDE_ENV, installed_versions, overridden

    versions = installed_versions()
    untested = [v for v in versions if not v.is_tested]
    info: dict[str, Any] = {v.library: {"installed": v.installed, "distribution": v.distribution,
                                        "tested": f"{v.tested}.x", "is_tested": v.is_tested} for v in versions}
    info["override"] = overridden()
    detail = "; ".join(v.describe() for v in versions)
    if not untested:
        return Check("versions", "ok", detail, "", info)
    if overridden():
        return Check("versions", "warn", f"{detail}; allowed by {OVERRIDE_ENV}=1, at your own risk", "", info)
    pins = " ".join(f"'{v.distribution or v.library}~={v.tested}.0'" for v in untested)
    status = "fail" if any(v.library == "trl" for v in untested) else "warn"
    return Check("versions", status, f"{detail}; training refuses it" if status == "fail"
                 else f"{detail}; a run generating with vLLM refuses it",
                 f"pip install {pins}, or {OVERRIDE_ENV}=1 to run anyway at your own risk", info)


def check_tested_set() -> Check:
    """The whole environment against the tested set (requirements-tested.txt; the GPU set, requirements-gpu.txt,
    under a CUDA torch): a difference is allowed, said."""
    from mutualrl.versions import installed_distributions, lock_differences, lock_name, read_lock

    lock_file = lock_name()
    lock = read_lock()
    if not lock:
        return Check("tested-set", "warn", f"{lock_file} not found: the environment cannot be compared", "")
    differences = lock_differences(lock, installed_distributions())
    if not differences:
        return Check("tested-set", "ok", f"every installed package at its version in {lock_file}")
    shown = "; ".join(differences[:6]) + (f"; and {len(differences) - 6} more" if len(differences) > 6 else "")
    return Check("tested-set", "warn", f"{len(differences)} package(s) differ from {lock_file}: {shown}",
                 f"./setup.sh installs the tested set (pip install -c {lock_file} ...)",
                 {"differences": differences})


def check_tiny_digests() -> Check:
    """The built tiny models against their recorded digests (the README's tiny-pool figures hold for those)."""
    from mutualrl.pools.tiny_digests import another_torch_build, verdicts

    found = verdicts()
    detail = "; ".join(v.detail for v in found)
    info = {v.name: v.status for v in found}
    if all(v.status == "same" for v in found):
        return Check("tiny-models", "ok", detail, "", info)
    if any(v.status == "damaged" for v in found):
        return Check("tiny-models", "fail", detail, "delete the folder named and run mutualrl assets fetch", info)
    if any(v.status == "differs" for v in found):
        return Check("tiny-models", "warn", detail, "report it with `mutualrl doctor --json`", info)
    if any(v.status == "missing" for v in found):
        return Check("tiny-models", "warn", detail, "mutualrl assets fetch", info)
    if another_torch_build():  # a GPU box's torch: kept by the set-up, so no set-up gives the recorded context
        return Check("tiny-models", "warn", detail, "nothing to install: the digests are of torch's CPU build, and the "
                     "README's tiny-pool figures are a CPU run of it (the builtin pool on GPUs trains another run)",
                     info)
    return Check("tiny-models", "warn", detail, "./setup.sh installs the versions the digests are recorded for", info)


def check_deepspeed_ops() -> Check:
    try:
        with contextlib.redirect_stdout(sys.stderr):
            from deepspeed.ops.op_builder import CPUAdamBuilder

            compatible = CPUAdamBuilder().is_compatible(verbose=False)
    except Exception as err:  # noqa: BLE001
        return Check("deepspeed-ops", "warn", f"cannot inspect ({type(err).__name__})", "")
    return Check("deepspeed-ops", "ok" if compatible else "warn",
                 "CPU Adam op compatible (compiled on first use)" if compatible else "CPU Adam op not compatible here",
                 "" if compatible else "install a C++ compiler and the Python headers")


def check_assets() -> Check:
    from mutualrl.assets.registry import all_assets

    missing = [a.name for a in all_assets() if a.default and not a.is_cached()]
    damaged = [f"{a.name}: {problem}" for a in all_assets() if a.default and a.is_cached() and a.problem is not None
               and (problem := a.problem()) is not None]  # a file missing or changed since it was built
    if damaged:
        shown = "; ".join([*damaged, *([f"not cached: {', '.join(missing)}"] if missing else [])])
        return Check("assets", "fail", shown, "delete the folder named and run mutualrl assets fetch")
    if missing:
        return Check("assets", "fail", f"default assets not cached: {', '.join(missing)}",
                     "mutualrl assets fetch (or ./setup.sh)")
    return Check("assets", "ok", "every default asset is cached as it was built (tiny pool, tests, offline "
                 "evaluation)")


def check_hub(timeout_s: float = HUB_TIMEOUT_S) -> Check:
    import urllib.error
    import urllib.request

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return Check("hub", "warn", "HF_HUB_OFFLINE is set: only cached and builtin models", "unset HF_HUB_OFFLINE")
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout_s)  # noqa: S310
    except (urllib.error.URLError, OSError) as err:
        return Check("hub", "warn", f"{endpoint} unreachable ({getattr(err, 'reason', err)}): the paper pools' models "
                     "must be in the local HF cache; the tiny pool needs no hub", "")
    return Check("hub", "ok", f"{endpoint} reachable")


def check_disk(run_dir: Path) -> Check:
    target = Path(run_dir).resolve()
    existing = next((p for p in [target, *target.parents] if p.exists()), Path("/"))
    free = shutil.disk_usage(existing).free / 2**30
    status = "ok" if free >= MIN_FREE_GIB else "warn"
    return Check("disk", status, f"{free:.0f} GiB free under {existing}",
                 "" if status == "ok" else f"a paper run wants >= {MIN_FREE_GIB:.0f} GiB for checkpoints and the SEE")


def check_run_filesystem(run_dir: Path) -> Check:
    """The filesystem the run folder (and its SEE exchange) is on, and a mount that would stall the barrier."""
    from mutualrl.ops.mounts import barrier_stall, mount_of

    mount = mount_of(run_dir)
    if mount is None:
        return Check("filesystem", "warn", f"{run_dir}: the mount table cannot be read here", "")
    info = {"fstype": mount.fstype, "source": mount.source, "mount_point": mount.point, "options": list(mount.options)}
    stall = barrier_stall(mount)
    if stall:
        return Check("filesystem", "warn", f"{run_dir}: {stall}", "remount the shared folder without nocto", info)
    return Check("filesystem", "ok", f"{run_dir} on {mount.describe()}", "", info)


def run_checks(run_dir: Path, hub: bool = True) -> list[Check]:
    from mutualrl.training.trackers import TRACKER_MODULES

    checks = check_torch()
    compiler = check_c_compiler()
    checks += [compiler] if compiler is not None else []
    checks += [
        check_module("trl", "trl", "pip install -e .", "training"),
        check_tested_versions(),
        check_tested_set(),
        check_module("deepspeed", "deepspeed", "./setup.sh --suite installs it (pip install -e '.[deepspeed]')",
                     "ZeRO-2/3 (the paper recipes)"),
        check_deepspeed_ops(),
        check_vllm(),
        check_module("flash-attn", "flash_attn", "pip install flash-attn (GPU only)", "faster attention (optional)"),
    ]
    checks += [check_module(name, TRACKER_MODULES[name][0], f"pip install {TRACKER_MODULES[name][0]}",
                            f"grpo.report_to: [{name}]") for name in COMMON_TRACKERS]
    checks += [check_assets(), check_tiny_digests(), check_disk(run_dir), check_run_filesystem(run_dir)]
    if hub:
        checks.append(check_hub())
    return checks

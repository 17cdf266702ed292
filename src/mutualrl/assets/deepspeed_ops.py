"""DeepSpeed's CPU communication op, compiled once at set-up instead of inside the first run.

On a CPU, DeepSpeed's torch backend builds its shared-memory all-reduce op (``deepspeed_shm_comm``,
``deepspeed/comm/torch.py: build_shm_op``) with torch's JIT extension loader the first time any process
initialises DeepSpeed; ninja rebuilds it whenever the compiler command differs, and the command names the
Python environment's paths. So the build folder is kept per environment (two virtual environments sharing
one ``$MUTUALRL_CACHE`` would otherwise rebuild it each time they alternate, a minute or more each), and
``mutualrl assets fetch op:deepspeed_shm_comm`` (a step of ``setup.sh --suite``) builds it where DeepSpeed runs on the CPU. With a GPU, DeepSpeed's
accelerator has no such op and nothing is built.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

from mutualrl.assets.cache import asset_lock, cache_dir
from mutualrl.assets.registry import Asset, register_asset
from mutualrl.errors import AssetError

SHM_OP = "deepspeed_shm_comm"
"""The op DeepSpeed's CPU accelerator builds at start-up (``ShareMemCommBuilder.NAME``'s library)."""


def torch_extensions_dir() -> Path:
    """Where DeepSpeed compiles its ops for this Python environment (``TORCH_EXTENSIONS_DIR`` of every
    DeepSpeed run): one folder per ``sys.prefix``, under the mutualrl cache."""
    prefix = os.path.abspath(sys.prefix)
    key = hashlib.sha1(prefix.encode()).hexdigest()[:10]
    return cache_dir() / "torch_extensions" / f"{Path(prefix).name}-{key}"


def deepspeed_on_cpu() -> bool:
    """DeepSpeed is installed and no CUDA device is visible (DeepSpeed then picks its CPU accelerator)."""
    if importlib.util.find_spec("deepspeed") is None:
        return False
    import torch

    return not torch.cuda.is_available()


def shm_op_built() -> bool:
    return (torch_extensions_dir() / SHM_OP / f"{SHM_OP}.so").is_file()


def build_shm_op() -> Path:
    """Compile (or find) the op exactly as DeepSpeed's CPU backend loads it; its folder."""
    folder = torch_extensions_dir()
    if not deepspeed_on_cpu():
        return folder
    os.environ["TORCH_EXTENSIONS_DIR"] = str(folder)
    with asset_lock("op", SHM_OP):
        from deepspeed.accelerator import get_accelerator

        import deepspeed.ops

        builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
        if builder is not None and deepspeed.ops.__compatible_ops__.get(builder.NAME, False):  # as DeepSpeed does
            try:
                builder.load(verbose=False)
            except Exception as err:  # the compiler's own message is above it, on stderr
                raise AssetError(f"DeepSpeed's CPU op {SHM_OP} did not compile into {folder} ({type(err).__name__}: "
                                 f"{str(err).splitlines()[0] if str(err) else 'no message'}); DeepSpeed runs on "
                                 f"this CPU need a C++ compiler (g++) and ninja") from None
    return folder / SHM_OP


register_asset(
    Asset(
        name=f"op:{SHM_OP}",
        kind="op",
        description="DeepSpeed's CPU shared-memory all-reduce, compiled once for this environment (CPU only)",
        fetch=build_shm_op,
        is_cached=lambda: shm_op_built() or not deepspeed_on_cpu(),
        default=False,  # setup.sh --suite compiles it on its own line: a box without a compiler still gets the rest
    )
)

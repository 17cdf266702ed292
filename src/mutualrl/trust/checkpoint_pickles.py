"""Checkpoint files are data: what a torch file may hold, checked by name before a resume and enforced at load.

A torch file (``optimizer.pt``, ``rng_state.pth``, DeepSpeed's ZeRO shards) is a zip archive around a pickle; unpickled
with ``weights_only=False`` (DeepSpeed's checkpoint engine does, accelerate's custom state does) any object in it can
run code. Two defences, with one list of the globals a checkpoint may name (:data:`EXTRA_SAFE_GLOBALS` beyond torch's
own ``weights_only`` list: numpy's RNG state, DeepSpeed's loss scaler, ZeRO stage and fragment address):

- :func:`unsafe_global` reads the pickle's opcodes without running them (stdlib only: the launcher imports no
  torch) and names the first global outside the list; ``checkpoint_problem`` uses it, so a tampered checkpoint is
  refused by name before any process loads it;
- :func:`load_checkpoints_as_data` makes every ``torch.load`` of the process ``weights_only=True`` with only those
  globals allowed (DeepSpeed, accelerate and transformers call ``torch.load`` by attribute, so their loads too):
  a file changed after the check is refused with one line naming it.
"""

from __future__ import annotations

import _compat_pickle
import io
import pickle
import pickletools
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

from mutualrl.errors import RunFolderError

EXTRA_SAFE_GLOBALS = (
    "_codecs.encode", "collections.OrderedDict", "collections.Counter", "builtins.set", "builtins.bytearray",
    "builtins.complex",
    "numpy.ndarray", "numpy.dtype", "numpy.dtypes.UInt32DType",
    "numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct",
    "deepspeed.runtime.fp16.loss_scaler.LossScaler", "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    "deepspeed.runtime.zero.config.ZeroStageEnum", "deepspeed.utils.tensor_fragment.fragment_address",
)
"""Globals a checkpoint may name beyond torch's tensor rebuilders, storages, dtypes and sizes."""
# torch's own weights_only list (``torch._weights_only_unpickler._get_allowed_globals``) by shape: tensor and storage
# classes, the ``_rebuild_*`` functions, dtypes and quantization schemes; the loader enforces the exact list.
_TORCH_SAFE = re.compile(
    r"torch\.(?:(?:cuda\.|sparse\.|cuda\.sparse\.)?[A-Za-z0-9]*(?:Storage|Tensor)|storage\.(?:Typed|Untyped)Storage"
    r"|Size|device|nn\.parameter\.Parameter|_utils\._rebuild_\w+|_tensor\._rebuild_from_type_v2"
    r"|serialization\._get_layout|(?:u?int|float|bfloat|complex|bits|q(?:u?int))\d\w*|bool|per_\w+)")
_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING"}
_UNNAMED = "a global the check cannot name"


def is_safe_global(name: str) -> bool:
    """``module.qualname`` is one a checkpoint may hold (plain tensors and the types listed above)."""
    return name in EXTRA_SAFE_GLOBALS or _TORCH_SAFE.fullmatch(name) is not None


def pickle_globals(data: bytes) -> list[str]:
    """The globals a pickle names (``module.qualname``), in order, read from its opcodes without running any."""
    names: list[str] = []
    recent: list[Any] = []  # what the last opcodes pushed: STACK_GLOBAL takes its module and name from there
    memo: dict[int, Any] = {}
    for opcode, arg, _ in pickletools.genops(io.BytesIO(data)):
        if opcode.name in ("GLOBAL", "INST"):
            names.append(_python3_name(*str(arg).split(" ", 1)))
        elif opcode.name == "STACK_GLOBAL":
            module, attr = recent if len(recent) == 2 else (None, None)
            names.append(_python3_name(module, attr) if isinstance(module, str) and isinstance(attr, str) else _UNNAMED)
        elif opcode.name.startswith("EXT"):
            names.append(_UNNAMED)
        elif opcode.name in ("MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT"):
            memo[len(memo) if opcode.name == "MEMOIZE" else int(arg)] = recent[-1] if recent else None
        elif opcode.name in ("BINGET", "LONG_BINGET", "GET"):
            recent.append(memo.get(int(arg)))
        else:
            recent.append(arg if opcode.name in _STRING_OPS else None)
        del recent[:-2]
    return names


def _python3_name(module: str, attr: str) -> str:
    """Protocol 2 (torch's) writes Python 2 names (``__builtin__.set``); unpickling maps them as pickle does."""
    module, attr = _compat_pickle.NAME_MAPPING.get((module, attr), (module, attr))
    return f"{_compat_pickle.IMPORT_MAPPING.get(module, module)}.{attr}"


def unsafe_global(path: Path) -> str | None:
    """The first global of the torch file ``path`` that a checkpoint may not hold, or None (a file that is no
    zip archive is for the damage checks to name)."""
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [archive.read(name) for name in archive.namelist() if name.endswith(".pkl")]
    except (OSError, EOFError, ValueError, zipfile.BadZipFile):
        return None
    for data in pickles:
        try:
            names = pickle_globals(data)
        except (ValueError, EOFError, pickle.UnpicklingError) as err:
            return f"an unreadable pickle ({err})"
        bad = next((name for name in names if not is_safe_global(name)), None)
        if bad is not None:
            return bad
    return None


def allowed_objects() -> list[Any]:
    """The objects of :data:`EXTRA_SAFE_GLOBALS` whose module this process has imported (DeepSpeed's are imported by
    its engine before it loads a checkpoint; nothing is imported here for them)."""
    found = []
    for name in EXTRA_SAFE_GLOBALS:
        module_name, _, attr = name.rpartition(".")
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, attr):
            found.append(getattr(module, attr))
    return found


def load_checkpoints_as_data() -> None:
    """From now on every ``torch.load`` of this process is ``weights_only=True`` with only the allowed globals,
    whatever its caller asked for; a refused file is one :class:`RunFolderError` naming it and what it holds."""
    import torch

    if getattr(torch.load, "_loads_data_only", False):
        return
    original = torch.load

    def load_as_data(f: Any, map_location: Any = None, pickle_module: Any = None, *, weights_only: Any = None,
                     **kwargs: Any) -> Any:
        with torch.serialization.safe_globals(allowed_objects()):
            try:
                return original(f, map_location=map_location, weights_only=True, **kwargs)
            except pickle.UnpicklingError as err:
                raise RunFolderError(f"{_file_name(f)}: refused to load: {_refusal(err)}; a checkpoint holds plain "
                                     "tensors only (this file was tampered with or is not a checkpoint)") from None

    load_as_data._loads_data_only = True  # type: ignore[attr-defined]
    torch.load = load_as_data


def _file_name(f: Any) -> str:
    return str(f) if isinstance(f, (str, Path)) else str(getattr(f, "name", "<a stream>"))


def _refusal(err: Exception) -> str:
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
    return f"it holds {found.group(1)}" if found else str(err).splitlines()[-1][:200]

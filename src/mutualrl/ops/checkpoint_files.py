"""Is a checkpoint complete? Its manifest, the files its kind needs, and files cut short.

A checkpoint folder is written file by file by transformers' ``Trainer._save_checkpoint``
(weights, optimizer, scheduler, RNG, trainer state); a kill, a crash or a full disk can stop
it anywhere, and a file can later be deleted or cut by hand. Resuming from such a folder
either fails on every retry (TRL: "Can't find a valid checkpoint") or, worse, goes on
silently without the optimizer's state (a fresh AdamW, which wrecks small models). So a
checkpoint counts only when :func:`checkpoint_problem` finds nothing:

- **its manifest** (:data:`MANIFEST_NAME`, written last by :func:`write_manifest` once every
  rank has saved) lists every file with its size: each must be there, exactly that long; and
  the xxh3_128 of each safetensors file, which must still match (a byte changed in the weights);
- **nothing but data**: a torch file's pickle may name only tensors and the few types checkpoints hold
  (:mod:`mutualrl.trust.checkpoint_pickles`); one that names anything else was tampered with and is refused by name;
- **the files its kind needs** (checked with or without a manifest, so a checkpoint of an
  older version is judged too): trainer state, RNG state of every rank, and either the
  weights (full, sharded or a LoRA adapter) with ``optimizer.pt`` and ``scheduler.pt``, or
  under DeepSpeed ``latest`` and the ZeRO model and optimizer shards of every rank of the
  tag it names (the ranks are read from the per-rank files present);
- **the regime's running state** (``mutualrl-regime-state.json``, ``training/regime_state.py``: HACPO's capability
  window) is judged as every other file, by the manifest and the JSON check; not required, since a checkpoint saved
  before it existed resumes (with that state afresh);
- **no file cut short**: JSON parses, a safetensors file is as long as its header says, a
  torch file's members match their CRCs. Every byte of the weights and the optimizer is read once (GB/s):
  the price of never resuming from garbage.
"""

from __future__ import annotations

import json
import re
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_json_atomic
from mutualrl.errors import UsageError
from mutualrl.pools.adapter_config import ADAPTER_CONFIG, adapter_config_problem
from mutualrl.trust.checkpoint_pickles import unsafe_global

MANIFEST_NAME = "mutualrl-manifest.json"
MANIFEST_FORMAT = "mutualrl-checkpoint-manifest"
HASH_KEY = "xxh3_128"
HASHED_SUFFIXES = (".safetensors",)
TRAINER_STATE = "trainer_state.json"
TRAINING_ARGS = "training_args.bin"
SAFETENSORS_MAX_HEADER = 100_000_000
"""The longest header the safetensors library itself reads (its ``HeaderTooLarge``)."""
JSON_ERRORS = (OSError, ValueError, RecursionError)
"""A JSON file that cannot be read, is not JSON, or is nested past the recursion limit (written to crash a reader)."""
RANK_FILE_RE = re.compile(r"^(?:rng_state_|(?:bf16_)?zero_pp_rank_)(\d+)[_.]")
ZERO_TAG_RE = re.compile(r"^global_step\d+$")
# Weights of a plain (non-DeepSpeed) checkpoint: any one of these makes them present.
FULL_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
SHARD_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def checkpoint_files(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` (relative POSIX path -> size in bytes), the manifest itself left out."""
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name != MANIFEST_NAME:
            files[path.relative_to(folder).as_posix()] = path.stat().st_size
    return files


def file_hash(path: Path) -> str:
    """xxh3_128 of a file, read in 16 MB pieces (several GB/s: the file was just written, it is in the page cache)."""
    import xxhash

    digest = xxhash.xxh3_128()
    with path.open("rb") as fh:
        for piece in iter(lambda: fh.read(1 << 24), b""):
            digest.update(piece)
    return digest.hexdigest()


def write_manifest(folder: Path, step: int) -> Path:
    """Record ``folder`` as complete: called once every rank has saved, so it is the last file written. Weights in
    safetensors carry no checksum of their own (torch files do: their zip CRCs), so theirs is recorded."""
    files = checkpoint_files(folder)
    hashes = {name: file_hash(folder / name) for name in files if name.endswith(HASHED_SUFFIXES)}
    return write_json_atomic(folder / MANIFEST_NAME, {
        "format": MANIFEST_FORMAT, "version": 1, "step": int(step), "files": files, HASH_KEY: hashes})


def drop_manifest(folder: Path) -> None:
    """A folder saved again (a resumed run reaching the step anew) is not complete until its new manifest."""
    (folder / MANIFEST_NAME).unlink(missing_ok=True)


def manifest_problem(folder: Path) -> str | None:
    """A file the manifest lists that is missing or of another size (None: no manifest, or all there)."""
    path = folder / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text())
        files = {str(k): int(v) for k, v in manifest["files"].items()}
    except (*JSON_ERRORS, KeyError, TypeError, AttributeError) as err:
        return f"{path}: unreadable manifest ({str(err)[:200]})"
    for name, size in files.items():
        target = folder / name
        if not target.is_file():
            return f"{target}: missing (its manifest lists it)"
        if target.stat().st_size != size:
            return f"{target}: {target.stat().st_size} bytes, its manifest says {size}"
    hashes = manifest.get(HASH_KEY) or {}
    if not isinstance(hashes, dict):
        return f"{path}: unreadable manifest ({HASH_KEY} is not a mapping)"
    for name, digest in sorted(hashes.items()):
        if (folder / str(name)).is_file() and file_hash(folder / str(name)) != digest:
            return f"{folder / str(name)}: damaged (its content changed since it was saved: {HASH_KEY} differs)"
    return None


def is_zero_checkpoint(folder: Path) -> bool:
    """DeepSpeed saved it: its tag file ``latest`` or a ``global_stepN`` folder of ZeRO shards is there."""
    return (folder / "latest").exists() or any(p.is_dir() and ZERO_TAG_RE.match(p.name) for p in folder.iterdir())


def world_size(folder: Path) -> int:
    """How many ranks saved the checkpoint, from the per-rank files it holds (1 when there are none)."""
    ranks = [int(m.group(1)) for p in folder.rglob("*") if (m := RANK_FILE_RE.match(p.name))]
    return max(ranks, default=0) + 1


def zero_missing(folder: Path, world: int) -> list[str]:
    """What is missing of a ZeRO checkpoint: ``latest`` (without it DeepSpeed loads nothing, silently), and
    the optimizer shard of every rank, the model states (per rank under ZeRO-3) of the tag it names."""
    missing = []
    tags = sorted((p.name for p in folder.iterdir() if p.is_dir() and ZERO_TAG_RE.match(p.name)),
                  key=lambda name: int(name.removeprefix("global_step")))
    try:
        tag = (folder / "latest").read_text().strip()
    except OSError:
        tag = ""
    if not ZERO_TAG_RE.match(tag):
        missing.append("ZeRO tag file (latest, naming a global_stepN folder)")
        tag = tags[-1] if tags else "global_step?"
    shards = folder / tag
    names = [p.name for p in shards.iterdir()] if shards.is_dir() else []
    for rank in range(world):
        if not any(n.endswith("optim_states.pt") and f"zero_pp_rank_{rank}_" in n for n in names):
            missing.append(f"ZeRO optimizer shard of rank {rank} ({tag}/zero_pp_rank_{rank}_*optim_states.pt)")
    per_rank = [n for n in names if n.endswith("model_states.pt") and "zero_pp_rank_" in n]
    if per_rank:
        missing += [f"ZeRO model states of rank {r} ({tag}/zero_pp_rank_{r}_*model_states.pt)" for r in range(world)
                    if not any(f"zero_pp_rank_{r}_" in n for n in per_rank)]
    elif not any(n.endswith("model_states.pt") for n in names):
        missing.append(f"ZeRO model states ({tag}/mp_rank_00_model_states.pt)")
    return missing


def weights_missing(folder: Path) -> str | None:
    """What is missing of the model's weights (full, sharded or a LoRA adapter), or None."""
    if (folder / ADAPTER_CONFIG).exists():
        present = any((folder / name).is_file() for name in ADAPTER_WEIGHTS)
        return None if present else "LoRA adapter weights (adapter_model.safetensors)"
    if any((folder / name).is_file() for name in FULL_WEIGHTS):
        return None
    for index in SHARD_INDEXES:
        if (folder / index).is_file():
            try:
                shards = set(json.loads((folder / index).read_text())["weight_map"].values())
            except (*JSON_ERRORS, KeyError, TypeError, AttributeError):
                return None  # an unreadable index is reported as such by the content checks
            absent = sorted(s for s in shards if not (folder / s).is_file())
            return f"weight shards named by {index} ({', '.join(absent)})" if absent else None
    return "model weights (model.safetensors)"


def rng_missing(folder: Path, world: int) -> str | None:
    """RNG state: ``rng_state.pth`` (one process) or ``rng_state_<rank>.pth`` of every rank 0..world-1."""
    if world == 1 and (folder / "rng_state.pth").is_file():
        return None
    absent = [f"rng_state_{r}.pth" for r in range(world) if not (folder / f"rng_state_{r}.pth").is_file()]
    if world == 1 and absent:
        return "RNG state (rng_state.pth)"
    return f"RNG state of every rank ({', '.join(absent)})" if absent else None


def required_missing(folder: Path) -> list[str]:
    """The files this checkpoint's kind needs to resume exactly, that are not there."""
    missing = []
    if not (folder / TRAINER_STATE).is_file():
        missing.append(f"trainer state ({TRAINER_STATE})")
    world = world_size(folder)
    if is_zero_checkpoint(folder):  # DeepSpeed: weights, optimizer (and its scheduler) live in the ZeRO shards
        missing += zero_missing(folder, world)
    else:
        missing += [w for w in [weights_missing(folder)] if w is not None]
        for what, name in (("optimizer state", "optimizer.pt"), ("scheduler state", "scheduler.pt")):
            if not (folder / name).is_file():
                missing.append(f"{what} ({name})")
    missing += [r for r in [rng_missing(folder, world)] if r is not None]
    return missing


def safetensors_problem(path: Path) -> str | None:
    """A safetensors file shorter than its header says (cut by a full disk or a kill), or unreadable."""
    try:
        with path.open("rb") as fh:
            header_len = int.from_bytes(fh.read(8), "little")
            if header_len > min(SAFETENSORS_MAX_HEADER, path.stat().st_size):  # read no more than the file holds
                return f"{path}: damaged safetensors header (it says {header_len} bytes long)"
            header: dict[str, Any] = json.loads(fh.read(header_len))
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
        expected = 8 + header_len + max(ends, default=0)
    except (*JSON_ERRORS, KeyError, TypeError, IndexError, AttributeError):
        return f"{path}: damaged safetensors header"
    if path.stat().st_size < expected:
        return f"{path}: truncated ({path.stat().st_size} of {expected} bytes)"
    return None


def torch_file_problem(path: Path) -> str | None:
    """A torch file (a zip archive) cut short, or with a byte changed anywhere: every member is read against its
    CRC (torch.load would fail on a damaged header, and load damaged tensor data silently). It reads the file
    once (GB/s), the price of never resuming from garbage."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (OSError, EOFError, ValueError, NotImplementedError, zipfile.BadZipFile, zlib.error) as err:
        return f"{path}: damaged ({err})"
    if bad is not None:
        return f"{path}: damaged ({bad} fails its checksum)"
    if path.name == TRAINING_ARGS:
        return None  # transformers writes it and never reads it back: no load unpickles it
    unsafe = unsafe_global(path)
    return f"{path}: refused: it holds {unsafe}, not plain tensors (tampered with)" if unsafe is not None else None


def content_problem(folder: Path) -> str | None:
    """The first file of ``folder`` that is cut short, unreadable or not a regular file (a FIFO would hang the
    reader), or None."""
    special = [p for p in sorted(folder.rglob("*")) if not p.is_dir() and not p.is_file()]
    if special:
        return f"{special[0]}: not a regular file (a FIFO, a device or a dangling link)"
    for path in sorted(folder.glob("*.json")):
        try:
            json.loads(path.read_text())
        except JSON_ERRORS as err:
            return f"{path}: unreadable ({str(err)[:200]})"
    for path in sorted(folder.rglob("*.safetensors")):
        problem = safetensors_problem(path)
        if problem is not None:
            return problem
    for pattern in ("*.pt", "*.pth", "*.bin"):
        for path in sorted(folder.rglob(pattern)):
            problem = torch_file_problem(path)
            if problem is not None:
                return problem
    return None


def step_problem(folder: Path) -> str | None:
    """``checkpoint-N`` whose trainer state (or manifest) says another step: resuming from it would log step N
    twice, or leave the policies waiting on each other's steps. None when they agree (or it is no checkpoint-N)."""
    named = re.match(r"^checkpoint-(\d+)$", folder.name)
    if named is None:
        return None
    step = int(named.group(1))
    for name, key in ((TRAINER_STATE, "global_step"), (MANIFEST_NAME, "step")):
        try:
            value = json.loads((folder / name).read_text())[key]
        except FileNotFoundError:
            continue
        except (*JSON_ERRORS, KeyError, TypeError) as err:
            return f"{folder / name}: holds no {key} ({type(err).__name__})"
        if not isinstance(value, int) or isinstance(value, bool) or value != step:
            return f"{folder / name}: says {key} {value!r}, but the folder is step {step}; not resumed from"
    return None


def checkpoint_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be resumed from exactly (missing, incomplete or damaged), or None when it can."""
    folder = Path(folder)
    if not folder.is_dir():
        return f"{folder}: not a checkpoint folder"
    missing = required_missing(folder)
    if missing:
        return f"{folder}: incomplete, missing {'; '.join(missing)}"
    return (manifest_problem(folder) or content_problem(folder) or adapter_config_problem(folder)
            or step_problem(folder))


def resumed_optimizer_step(checkpoint: Path, optimizer_state: Mapping[Any, Any]) -> int | None:
    """After Trainer resumed from ``checkpoint`` (not DeepSpeed, whose shards :func:`zero_missing` checks): the
    optimizer's step count (None: its kind keeps none). Raises when the checkpoint holds no optimizer state:
    Trainer would then go on with a fresh optimizer and say nothing."""
    if not any((checkpoint / name).is_file() for name in ("optimizer.pt", "optimizer.bin")):
        raise UsageError(f"{checkpoint}: no optimizer state (optimizer.pt); resuming from it would restart the "
                         "optimizer afresh: `mutualrl train --resume` picks the newest complete checkpoint")
    steps = [float(s["step"]) for s in optimizer_state.values() if isinstance(s, Mapping) and "step" in s]
    return int(max(steps)) if steps else None

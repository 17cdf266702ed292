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
  window) is judged by the manifest and read by the worker's own strict reader
  (:func:`~mutualrl.regimes.core.state_file.read_regime_state`: no ``Infinity``, a dtype HACPO keeps), so a state
  the worker would refuse passes the checkpoint over here; not required, since a checkpoint saved before it existed
  resumes (with that state afresh);
- **no file cut short**: JSON parses, a safetensors file is as long as its header says, a
  torch file's members match their CRCs. Every byte of the weights and the optimizer is read once (GB/s):
  the price of never resuming from garbage.

With a manifest, the checkpoint is exactly the files it names: the files its kind needs, the number of ranks that
saved it and every content check are taken from those names alone. Anything else found in the folder (a stray empty
``rng_state_7.pth``, an editor's backup) is said in one line by :func:`stray_files_line` and changes nothing, unless
a library would load it by its name in place of the checkpoint's own (a ``model.safetensors`` beside a LoRA adapter,
a ``latest`` tag of a checkpoint without one): then the checkpoint is not what its manifest says, and is refused.
Without a manifest (an older version's checkpoint) every file found is judged. Names are read in ASCII: a rank or
step spelt in other digits (``rng_state_٣.pth``, ``checkpoint-٣``) names nothing, and a rank file naming a rank
far beyond the files present is named rather than counted up to.
"""

from __future__ import annotations

import json
import re
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_json_atomic
from mutualrl.errors import UsageError
from mutualrl.pools.adapter_config import ADAPTER_CONFIG, adapter_config_problem
from mutualrl.regimes.core.state_file import REGIME_STATE_NAME, RegimeStateError, read_regime_state
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
# ASCII digits: a regex's \d (and str.isdigit) also take other scripts' digits, which int() reads as a number that
# then names another file
RANK_FILE_RE = re.compile(r"^(?:rng_state_|(?:bf16_)?zero_pp_rank_)([0-9]+)[_.]")
ZERO_TAG_RE = re.compile(r"^global_step[0-9]+$")
CHECKPOINT_NAME_RE = re.compile(r"^checkpoint-(0|[1-9][0-9]*)$")
"""A checkpoint folder's name: the step as Trainer writes it (``checkpoint-{step}``), ASCII, no leading zero."""
MAX_RANKS = 1 << 16
"""More ranks than any run here has: a rank file naming one beyond it is a stray, never counted up to."""
SHOWN = 3
"""Names a one-line message lists before it counts the rest."""
# Weights of a plain (non-DeepSpeed) checkpoint: any one of these makes them present.
FULL_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
SHARD_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
#: Files transformers' Trainer, peft, DeepSpeed or the worker (the regime's state) open by these names when resuming:
#: one the manifest does not name would be loaded in place of (or beside) what was saved.
LOADED_BY_NAME = frozenset({*FULL_WEIGHTS, *SHARD_INDEXES, *ADAPTER_WEIGHTS, "adapter_config.json", "optimizer.pt",
                            "optimizer.bin", "scheduler.pt", "rng_state.pth", "latest", TRAINER_STATE,
                            REGIME_STATE_NAME})


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


def rank_of(name: str) -> int | None:
    """The rank a checkpoint file's name says wrote it (``rng_state_3.pth``, ``global_step8/zero_pp_rank_3_...``);
    None for a file of the whole policy (its weights, ``latest``, the trainer state)."""
    match = RANK_FILE_RE.match(name.rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


def merge_rank_reports(reports: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """A checkpoint's files from what each rank saw of its folder (``reports[r]``: :func:`checkpoint_files` on rank
    r, after every rank saved). On a filesystem several machines share, a machine's view can lag (NFS's attribute
    cache): rank 0 may not list another machine's ZeRO shards yet, or see a stale size. So each rank's own files (its
    rank in their name) are taken as that rank saw them, every other file as rank 0 saw it, then as any rank did."""
    merged: dict[str, int] = {}
    for rank, report in enumerate(reports):
        merged.update({name: size for name, size in report.items() if rank_of(name) == rank})
    for report in reports:  # rank 0's view first
        for name, size in report.items():
            merged.setdefault(name, size)
    return dict(sorted(merged.items()))


def write_manifest(folder: Path, step: int, files: Mapping[str, int] | None = None) -> Path:
    """Record ``folder`` as complete: called once every rank has saved, so it is the last file written; ``files``:
    what the ranks report they wrote (:func:`merge_rank_reports`; None: what this process sees). Weights in
    safetensors carry no checksum of their own (torch files do: their zip CRCs), so theirs is recorded (those this
    process sees: the weights are rank 0's)."""
    files = dict(files) if files is not None else checkpoint_files(folder)
    hashes = {name: file_hash(folder / name) for name in files
              if name.endswith(HASHED_SUFFIXES) and (folder / name).is_file()}
    return write_json_atomic(folder / MANIFEST_NAME, {
        "format": MANIFEST_FORMAT, "version": 1, "step": int(step), "files": files, HASH_KEY: hashes})


def drop_manifest(folder: Path) -> None:
    """A folder saved again (a resumed run reaching the step anew) is not complete until its new manifest."""
    (folder / MANIFEST_NAME).unlink(missing_ok=True)


class ManifestError(ValueError):
    """A manifest that cannot be read, or names what no checkpoint file can be; its message is one line."""


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """``folder``'s manifest with its ``files`` (name -> size) and hashes checked for shape; None when it has none.
    Every name must be a plain relative path inside the folder (no ``..``, no absolute path, no empty part)."""
    path = folder / MANIFEST_NAME
    if not path.exists() and not path.is_symlink():
        return None
    try:
        if path.is_symlink() or not path.is_file():
            raise ValueError("not a regular file")
        manifest = json.loads(path.read_text())
        files, hashes = manifest["files"], manifest.get(HASH_KEY) or {}
        if not isinstance(files, dict) or not isinstance(hashes, dict):
            raise TypeError(f"files and {HASH_KEY} must be mappings")
        for name, size in files.items():
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise TypeError(f"{str(name)[:80]!r}: size {str(size)[:40]!r} is no byte count")
            if not plain_name(name):
                raise ValueError(f"{str(name)[:80]!r} names no file inside the checkpoint")
        if not all(isinstance(name, str) and name in files and isinstance(digest, str)
                   for name, digest in hashes.items()):
            raise TypeError(f"{HASH_KEY} names a file the manifest does not list, or holds no digest")
    except (*JSON_ERRORS, KeyError, TypeError, AttributeError) as err:
        raise ManifestError(f"{path}: unreadable manifest ({str(err)[:200]})") from None
    return manifest


def plain_name(name: Any) -> bool:
    """A relative POSIX path of a file inside a folder: no absolute path, ``..``, ``.`` or empty part, no NUL."""
    if not isinstance(name, str) or not name or "\x00" in name or name.startswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def judged_files(folder: Path) -> tuple[set[str], dict[str, Any] | None]:
    """The names a checkpoint is judged by and its manifest: exactly the files the manifest lists, or, without one,
    every regular file found (:func:`checkpoint_files`). Raises :class:`ManifestError`."""
    manifest = read_manifest(folder)
    if manifest is None:
        return set(checkpoint_files(folder)), None
    return set(manifest["files"]), manifest


def manifest_problem(folder: Path, manifest: dict[str, Any] | None = None) -> str | None:
    """A file the manifest lists that is missing, not a regular file, of another size or changed (None: no
    manifest, or all there)."""
    if manifest is None:
        try:
            manifest = read_manifest(folder)
        except ManifestError as err:
            return str(err)
        if manifest is None:
            return None
    for name, size in manifest["files"].items():
        target = folder / name
        if target.is_symlink() or not target.exists():
            return f"{target}: missing (its manifest lists it)" if not target.is_symlink() else \
                f"{target}: a link where its manifest lists a file"
        if not target.is_file():
            return f"{target}: not a regular file (a FIFO, a device or a folder) where its manifest lists a file"
        if target.stat().st_size != size:
            return f"{target}: {target.stat().st_size} bytes, its manifest says {size}"
    for name, digest in sorted((manifest.get(HASH_KEY) or {}).items()):
        if file_hash(folder / name) != digest:
            return f"{folder / name}: damaged (its content changed since it was saved: {HASH_KEY} differs)"
    return None


def stray_files(folder: Path, names: set[str]) -> list[str]:
    """What ``folder`` holds besides ``names`` and its manifest (files, links, FIFOs; folders only when empty of
    ``names``), as relative POSIX paths, sorted; a temporary file of an interrupted save counts."""
    listed_dirs = {parent for name in names for parent in ("/".join(name.split("/")[:i])
                                                           for i in range(1, name.count("/") + 1))}
    found = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if relative == MANIFEST_NAME or relative in names or relative in listed_dirs:
            continue
        if path.is_dir() and not path.is_symlink() and any(path.iterdir()):
            continue  # its entries are listed one by one
        found.append(relative)
    return found


def stray_files_line(folder: Path) -> str | None:
    """One line naming what ``folder`` holds besides the files its manifest lists (None: nothing, no manifest, or
    an unreadable one: :func:`checkpoint_problem` says that)."""
    try:
        manifest = read_manifest(folder)
    except ManifestError:
        return None
    if manifest is None:
        return None
    strays = stray_files(folder, set(manifest["files"]))
    if not strays:
        return None
    return (f"{folder}: also holds {shown(strays)}, which its manifest does not list: not part of the checkpoint, "
            "not read by its checks and left where it is")


def shown(names: list[str]) -> str:
    """Up to :data:`SHOWN` names, then how many more: a line stays a line whatever a folder holds."""
    head = ", ".join(repr(name[:120]) for name in names[:SHOWN])
    return head + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def loaded_strays(folder: Path, names: set[str]) -> str | None:
    """A file the manifest does not list that a library would load by its name on resume, or None."""
    strays = [name for name in stray_files(folder, names) if name in LOADED_BY_NAME]
    if not strays:
        return None
    return (f"{folder}: holds {shown(strays)}, which its manifest does not list and a resume would load by its "
            "name: the checkpoint is not what was saved")


def is_zero_tag(name: str) -> bool:
    return ZERO_TAG_RE.match(name) is not None


def zero_tag(folder: Path, names: set[str]) -> str | None:
    """The tag ``latest`` names (when it is one of ``names``), else None."""
    if "latest" not in names:
        return None
    try:
        tag = (folder / "latest").read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return tag if is_zero_tag(tag) else None


def is_zero_checkpoint(folder: Path, names: set[str] | None = None) -> bool:
    """DeepSpeed saved it: its tag file ``latest`` or a ``global_stepN`` folder of ZeRO shards is among ``names``
    (default: the files :func:`judged_files` takes)."""
    names = judged_names(folder) if names is None else names
    return "latest" in names or any(is_zero_tag(name.split("/")[0]) for name in names if "/" in name)


def judged_names(folder: Path) -> set[str]:
    """:func:`judged_files`' names; an unreadable manifest: every file found (the checks then refuse it)."""
    try:
        return judged_files(folder)[0]
    except ManifestError:
        return set(checkpoint_files(folder))


def saved_ranks_of(names: set[str]) -> set[int]:
    """The ranks named by the per-rank files among ``names`` (ASCII rank numbers only)."""
    return {int(m.group(1)) for name in names if (m := RANK_FILE_RE.match(name.rsplit("/", 1)[-1]))}


def world_size(folder: Path, names: set[str] | None = None) -> int:
    """How many ranks saved the checkpoint, from the per-rank files among ``names`` (default: the files
    :func:`judged_files` takes; 1 when there are none)."""
    return max(saved_ranks_of(judged_names(folder) if names is None else names), default=0) + 1


def plausible_world(names: set[str]) -> int | None:
    """:func:`world_size` of ``names``, or None when a rank file names a rank far beyond the files present (more
    than :data:`MAX_RANKS`, or more than four times the ranks found): a stray, which counts no rank."""
    present = saved_ranks_of(names)
    world = max(present, default=0) + 1
    return None if world > MAX_RANKS or world > 4 * len(present) + 8 else world


def absent_ranks(present: set[int], world: int) -> tuple[int, list[int]]:
    """How many of ranks 0..world-1 are not in ``present``, and the first :data:`SHOWN` of them, in time bounded by
    ``present`` (a stray ``rng_state_99999999999.pth`` is not counted up to)."""
    count = world - len({rank for rank in present if rank < world})
    first, rank = [], 0
    while len(first) < min(SHOWN, count):
        if rank not in present:
            first.append(rank)
        rank += 1
    return count, first


def ranks_text(what: str, pattern: str, count: int, first: list[int]) -> str:
    """``what`` of ranks ``first`` (and how many more), their files named by ``pattern`` (``{r}``: the rank)."""
    more = f" and {count - len(first)} more ranks" if count > len(first) else ""
    return f"{what} of rank{'s' * (count > 1)} {', '.join(map(str, first))}{more} ({pattern.format(r=first[0])})"


def zero_missing(folder: Path, world: int, names: set[str] | None = None) -> list[str]:
    """What is missing of a ZeRO checkpoint: ``latest`` (without it DeepSpeed loads nothing, silently), and
    the optimizer shard of every rank, the model states (per rank under ZeRO-3) of the tag it names."""
    names = judged_names(folder) if names is None else names
    missing = []
    tags = sorted({name.split("/")[0] for name in names if "/" in name and is_zero_tag(name.split("/")[0])},
                  key=lambda tag: int(tag.removeprefix("global_step")))
    tag = zero_tag(folder, names)
    if tag is None:
        missing.append("ZeRO tag file (latest, naming a global_stepN folder)")
        tag = tags[-1] if tags else "global_step?"
    shards = [name[len(tag) + 1:] for name in names if name.startswith(f"{tag}/") and "/" not in name[len(tag) + 1:]]
    optim = saved_ranks_of({n for n in shards if n.endswith("optim_states.pt")})
    count, first = absent_ranks(optim, world)
    if count:
        missing.append(ranks_text("ZeRO optimizer shard", f"{tag}/zero_pp_rank_{{r}}_*optim_states.pt", count, first))
    per_rank = {n for n in shards if n.endswith("model_states.pt") and "zero_pp_rank_" in n}
    if per_rank:
        count, first = absent_ranks(saved_ranks_of(per_rank), world)
        if count:
            missing.append(ranks_text("ZeRO model states", f"{tag}/zero_pp_rank_{{r}}_*model_states.pt", count, first))
    elif not any(n.endswith("model_states.pt") for n in shards):
        missing.append(f"ZeRO model states ({tag}/mp_rank_00_model_states.pt)")
    return missing


def weights_missing(folder: Path, names: set[str] | None = None) -> str | None:
    """What is missing of the model's weights (full, sharded or a LoRA adapter) among ``names``, or None."""
    names = judged_names(folder) if names is None else names
    if ADAPTER_CONFIG in names:
        present = any(name in names for name in ADAPTER_WEIGHTS)
        return None if present else "LoRA adapter weights (adapter_model.safetensors)"
    if any(name in names for name in FULL_WEIGHTS):
        return None
    for index in SHARD_INDEXES:
        if index in names:
            try:
                shards = set(json.loads((folder / index).read_text())["weight_map"].values())
            except (*JSON_ERRORS, KeyError, TypeError, AttributeError):
                return None  # an unreadable index is reported as such by the content checks
            absent = sorted(str(s) for s in shards if s not in names)
            return f"weight shards named by {index} ({shown(absent)})" if absent else None
    return "model weights (model.safetensors)"


def rng_missing(folder: Path, world: int, names: set[str] | None = None) -> str | None:
    """RNG state among ``names``: ``rng_state.pth`` (one process) or ``rng_state_<rank>.pth`` of every rank
    0..world-1."""
    names = judged_names(folder) if names is None else names
    if world == 1 and "rng_state.pth" in names:
        return None
    count, first = absent_ranks(saved_ranks_of({n for n in names if n.startswith("rng_state_")}), world)
    if world == 1 and count:
        return "RNG state (rng_state.pth)"
    return ranks_text("RNG state", "rng_state_{r}.pth", count, first) if count else None


def required_missing(folder: Path, names: set[str] | None = None) -> list[str]:
    """The files this checkpoint's kind needs to resume exactly that are not among ``names`` (default: the files
    :func:`judged_files` takes: a manifest's, else every file found)."""
    names = judged_names(folder) if names is None else names
    missing = []
    if TRAINER_STATE not in names:
        missing.append(f"trainer state ({TRAINER_STATE})")
    present = saved_ranks_of(names)
    world = max(present, default=0) + 1
    if plausible_world(names) is None:  # one rank file far beyond the others: named, not counted up to
        stray = next(name for name in sorted(names) if (m := RANK_FILE_RE.match(name.rsplit("/", 1)[-1]))
                     and int(m.group(1)) == world - 1)
        return [*missing, f"the files of ranks 0..{world - 2} that {stray[:120]!r} implies ({len(present)} ranks' "
                          "files are here: is it a stray file?)"]
    if is_zero_checkpoint(folder, names):  # DeepSpeed: weights, optimizer (and its scheduler) live in the shards
        missing += zero_missing(folder, world, names)
    else:
        missing += [w for w in [weights_missing(folder, names)] if w is not None]
        for what, name in (("optimizer state", "optimizer.pt"), ("scheduler state", "scheduler.pt")):
            if name not in names:
                missing.append(f"{what} ({name})")
    missing += [r for r in [rng_missing(folder, world, names)] if r is not None]
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


def content_problem(folder: Path, names: set[str] | None = None) -> str | None:
    """The first of ``names`` (default: every file of ``folder``, each of which must then be a regular file: a FIFO
    would hang the reader) that is cut short or unreadable, or None."""
    if names is None:
        special = [p for p in sorted(folder.rglob("*")) if not p.is_dir() and not p.is_file()]
        if special:
            return f"{special[0]}: not a regular file (a FIFO, a device or a dangling link)"
        names = set(checkpoint_files(folder))
    ordered = sorted(names)
    for name in ordered:
        if name == REGIME_STATE_NAME:  # read as the worker reads it: one it would refuse is passed over here
            try:
                read_regime_state(folder / name)
            except RegimeStateError as err:
                return str(err)
        elif "/" not in name and name.endswith(".json"):
            try:
                json.loads((folder / name).read_text())
            except JSON_ERRORS as err:
                return f"{folder / name}: unreadable ({str(err)[:200]})"
    for name in ordered:
        if name.endswith(".safetensors"):
            problem = safetensors_problem(folder / name)
            if problem is not None:
                return problem
    for suffix in (".pt", ".pth", ".bin"):
        for name in ordered:
            if name.endswith(suffix):
                problem = torch_file_problem(folder / name)
                if problem is not None:
                    return problem
    return None


def step_problem(folder: Path) -> str | None:
    """``checkpoint-N`` whose trainer state (or manifest) says another step: resuming from it would log step N
    twice, or leave the policies waiting on each other's steps. None when they agree (or it is no checkpoint-N)."""
    named = CHECKPOINT_NAME_RE.match(folder.name)
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
    try:
        names, manifest = judged_files(folder)
    except ManifestError as err:
        return str(err)
    if manifest is not None:  # the listed files first: a missing one is named as such, not as a need of its kind
        problem = manifest_problem(folder, manifest) or loaded_strays(folder, names)
        if problem is not None:
            return problem
    missing = required_missing(folder, names)
    if missing:
        return f"{folder}: incomplete, missing {'; '.join(missing)}"
    return (content_problem(folder, names if manifest is not None else None)
            or (adapter_config_problem(folder) if ADAPTER_CONFIG in names else None) or step_problem(folder))


def resumed_optimizer_step(checkpoint: Path, optimizer_state: Mapping[Any, Any]) -> int | None:
    """After Trainer resumed from ``checkpoint`` (not DeepSpeed, whose shards :func:`zero_missing` checks): the
    optimizer's step count (None: its kind keeps none). Raises when the checkpoint holds no optimizer state:
    Trainer would then go on with a fresh optimizer and say nothing."""
    if not any((checkpoint / name).is_file() for name in ("optimizer.pt", "optimizer.bin")):
        raise UsageError(f"{checkpoint}: no optimizer state (optimizer.pt); resuming from it would restart the "
                         "optimizer afresh: `mutualrl train --resume` picks the newest complete checkpoint")
    steps = [float(s["step"]) for s in optimizer_state.values() if isinstance(s, Mapping) and "step" in s]
    return int(max(steps)) if steps else None

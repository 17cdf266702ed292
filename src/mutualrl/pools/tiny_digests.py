"""The tiny models' recorded digests: is the model this machine built the one the README's figures came from?

``tiny_digests.json`` (beside this module) holds the sha256 of each tiny model's weights as the tested set
(``requirements-tested.txt``) builds them, with the torch and transformers versions and the machine type
they hold for. The set-up (``mutualrl assets fetch``), ``mutualrl doctor`` and the suite compare; ``train`` (and
every process that loads a ``builtin:tiny-*`` model) refuses weights that differ where the build context is the one
recorded (:func:`refuse_other_weights`): the cache's own record of its files is rewritten as easily as the weights.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from mutualrl.errors import AssetError
from mutualrl.pools.tiny import (
    TINY_MODELS,
    is_tiny_model_cached,
    read_warm_start_report,
    tiny_model_dir,
    tiny_model_problem,
)
from mutualrl.pools.tiny_warm_start import build_versions, weights_digest

RECORD = Path(__file__).with_name("tiny_digests.json")


@dataclass(frozen=True)
class DigestVerdict:
    """One tiny model against the record: ``same``, ``differs``, ``unchecked`` (another environment), ``missing``,
    or ``damaged`` (a file missing or changed since this machine built it: the cache's doing, not the machine's)."""

    name: str
    status: str
    detail: str


def build_context() -> dict[str, str]:
    """What the recorded digests hold for: the versions that build the bytes, the machine type and the CPU's vendor
    (pinned kernels give one model on every AMD EPYC measured; an Intel Xeon built another,
    benchmarks/results/tiny-determinism.md)."""
    return {**build_versions(), "machine": platform.machine(), "cpu": cpu_vendor()}


def cpu_vendor() -> str:
    """The CPU's vendor as Linux names it (``AuthenticAMD``, ``GenuineIntel``); ``unknown`` where it is not said."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("vendor_id", "CPU implementer"):
                    return value.strip() or "unknown"
    except OSError:
        pass
    return "unknown"


def read_record(path: Path = RECORD) -> dict:
    """The packaged record, with the build of this machine's context where it holds one among its ``builds`` (the
    top level is the first measured; ``builds`` the others, each with its own ``built_with`` and ``sha256``)."""
    record = json.loads(path.read_text())
    context = build_context()
    for other in record.get("builds", []):
        if other.get("built_with") == context:
            return {**record, "built_with": other["built_with"], "sha256": other["sha256"]}
    return record


def verdict(name: str, record: dict | None = None) -> DigestVerdict:
    """How tiny model ``name`` as cached here compares with the recorded digest."""
    record = read_record() if record is None else record
    if not is_tiny_model_cached(name):
        return DigestVerdict(name, "missing", f"{name}: not built yet (mutualrl assets fetch)")
    damaged = tiny_model_problem(name)
    if damaged is not None:
        return DigestVerdict(name, "damaged", f"{name}: {damaged}: delete {tiny_model_dir(name)} and run "
                             f"`mutualrl assets fetch model:{name}` to build it again")
    context = build_context()
    held = record["built_with"]
    if context != held or record["recipe_hash"].get(name) != TINY_MODELS[name].recipe_hash():
        other = ", ".join(f"{k} {context[k]}" for k in held if context.get(k) != held[k]) or "another recipe"
        return DigestVerdict(name, "unchecked", f"{name}: digests are recorded for "
                             f"{', '.join(f'{k} {v}' for k, v in held.items())}; here {other}")
    built = weights_digest(tiny_model_dir(name))
    if built == record["sha256"][name]:
        return DigestVerdict(name, "same", f"{name}: sha256 {built[:12]}, as recorded")
    env = read_warm_start_report(name).get("build_env")
    return DigestVerdict(name, "differs", f"{name}: weights sha256 {built[:12]} differ from the recorded "
                         f"{record['sha256'][name][:12]} (built under {env}): the README's tiny-pool figures and "
                         "the tests tied to its behaviour may not hold on this machine")


def another_torch_build(record: dict | None = None) -> bool:
    """True where this torch is the recorded release in another build (a CUDA wheel, ``2.13.0+cu128``, beside the
    recorded ``2.13.0+cpu``): the set-up keeps a GPU box's torch, so its tiny models are not compared, and no set-up
    makes them so."""
    held = (read_record() if record is None else record)["built_with"].get("torch", "")
    here = build_context().get("torch", "")
    return here != held and here.split("+")[0] == held.split("+")[0]


def verdicts() -> list[DigestVerdict]:
    record = read_record()
    return [verdict(name, record) for name in TINY_MODELS]


ALLOW_OTHER_WEIGHTS_ENV = "MUTUALRL_ALLOW_OTHER_TINY_WEIGHTS"
"""``1``: train with tiny models whose weights differ from the packaged digest of this build context (a CPU of the
recorded vendor that builds other bytes; a rewritten cache is then not caught)."""


def refuse_other_weights(name: str) -> None:
    """Raise :class:`AssetError` in one line when tiny model ``name``'s weights differ from the packaged digest and
    this machine's build context (versions, machine type, recipe) is the one the digest holds for: what is cached is
    then not what the tested set builds (rewritten, with its ``mutualrl-files.json``). Another context is not
    compared (``doctor`` says so); a damaged folder is refused by its own record first."""
    found = verdict(name)
    if found.status != "differs" or os.environ.get(ALLOW_OTHER_WEIGHTS_ENV) == "1":
        return
    folder = tiny_model_dir(name)
    raise AssetError(f"{folder / 'model.safetensors'}: {found.detail.removeprefix(f'{name}: ')}; the packaged digest "
                     f"holds for this machine's versions ({', '.join(f'{k} {v}' for k, v in build_context().items())}),"
                     f" so the cache is not what was built: delete {folder} and run `mutualrl assets fetch "
                     f"model:{name}` to build it again; if a fresh build differs too, this CPU builds other weights: "
                     f"{ALLOW_OTHER_WEIGHTS_ENV}=1 trains with them (the README's figures may not hold; please report "
                     f"`mutualrl doctor --json`)")

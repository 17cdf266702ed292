"""Multi-Worker Resource Allocation: which devices each policy's worker group gets.

Paper, Sec. "Multi-Worker Resource Allocation": "By default, it distributes workers for
different policies evenly across devices. Users can override the placement with an
explicit device map to pin specific policies to selected devices." App. "Implementation
details" trains each policy on its own GPU(s) of one 8-GPU node.

Everything here is a pure function of its arguments (device counts are passed in, never
detected), so a placement can be planned and tested for a node this machine is not:
``plan_placement(..., gpus=8)`` simulates an 8-GPU node. A placement that cannot work
raises :class:`~mutualrl.errors.PlacementError` before any process starts.

GPU ids are the parent's logical ids ``0..gpus-1`` (relative to its own
``CUDA_VISIBLE_DEVICES``); :mod:`mutualrl.launch.plan.commands` maps them to the child's mask.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

from mutualrl.errors import PlacementError, UsageError

DeviceType = Literal["cuda", "cpu"]


@dataclass(frozen=True)
class PolicyPlacement:
    """Where one policy's process group runs."""

    name: str
    device_type: DeviceType
    devices: tuple[int, ...]
    """GPU ids (parent-logical) for ``cuda``; empty for ``cpu``. With several machines: global ids, machine
    ``id // gpus`` (see :mod:`mutualrl.launch.plan.machines`)."""
    num_processes: int
    """One process per GPU; ``launch.cpu_processes`` on CPU; summed over the policy's machines."""
    cpu_threads: int
    """CPU threads for the whole group on one machine (``OMP_NUM_THREADS`` of a CPU worker)."""
    share: float = 1.0
    machines: tuple[int, ...] = (0,)
    """The machines the policy's ranks run on (the first one hosts its rank 0)."""

    @property
    def world_size(self) -> int:
        return self.num_processes

    @property
    def processes_per_machine(self) -> int:
        return self.num_processes // len(self.machines)


@dataclass
class Placement:
    """The result of MWRA: one :class:`PolicyPlacement` per policy, in pool order."""

    policies: list[PolicyPlacement]
    gpus: int
    cpu_cores: int
    explicit: bool
    """True when the user gave a device map."""
    idle_gpus: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    nodes: int = 1
    """Machines; ``gpus`` is per machine."""

    @property
    def device_type(self) -> DeviceType:
        return "cuda" if self.gpus > 0 else "cpu"

    def of(self, name: str) -> PolicyPlacement:
        for placed in self.policies:
            if placed.name == name:
                return placed
        raise KeyError(name)

    def to_dict(self) -> dict:
        out = asdict(self)
        for placed in out["policies"]:
            placed["devices"], placed["machines"] = list(placed["devices"]), list(placed["machines"])
        return out


def plan_placement(
    policies: Sequence[tuple[str, float]],
    gpus: int | None,
    device_map: Mapping[str, Sequence[int]] | None = None,
    cpu_cores: int | None = None,
    threads_per_policy: int | None = None,
    world_size_ok: Callable[[str, int], bool] | None = None,
    cpu_processes: int = 1,
) -> Placement:
    """Place each ``(name, device_share)`` policy on GPUs (or on the CPU when ``gpus == 0``).

    - Default: the ``gpus`` GPUs are split by ``device_share`` with largest-remainder
      apportionment, every policy at least one GPU, each policy a contiguous block of ids
      in pool order (2 policies on 8 GPUs: 4 + 4; 4 on 8: 2 each; 3 on 8: 3, 3, 2).
    - ``device_map``: an explicit ``{policy: [gpu ids]}``; every policy must be mapped, ids
      must exist; two policies may share a GPU (a warning says so).
    - ``world_size_ok(name, n)``: optional check that a policy can use ``n`` processes (the
      batch must divide across them, see :mod:`mutualrl.launch.plan.batching`). In the default
      split a policy whose share does not pass is shrunk to the largest size that does, and
      the freed GPUs go to the policies that can use them (:func:`_regrow`); only what none can
      use stays idle (with a warning). An explicit map is never changed.
    - CPU (``gpus == 0``): ``cpu_processes`` ranks per policy (default one); ``cpu_cores`` are
      split evenly between policies (``threads_per_policy`` overrides), at least one thread each.

    ``gpus=None`` is an error here: the caller detects the count
    (``torch.cuda.device_count()``) so that this function stays pure.
    """
    _check_placement_args(policies, gpus, threads_per_policy)
    cores = max(1, cpu_cores or 1)
    if gpus == 0:
        return _place_on_cpu(policies, cores, device_map, threads_per_policy, cpu_processes)

    names = [name for name, _ in policies]
    if device_map:
        blocks, idle, warnings = _explicit_blocks(names, gpus, device_map)
    else:
        blocks, idle, warnings = _even_blocks(policies, gpus, world_size_ok)

    threads = threads_per_policy or max(1, cores // len(policies))
    placed = [
        PolicyPlacement(name, "cuda", tuple(blocks[name]), len(blocks[name]), threads, share)
        for name, share in policies
    ]
    return Placement(placed, gpus, cores, explicit=bool(device_map), idle_gpus=idle, warnings=warnings)


def _check_placement_args(policies: Sequence[tuple[str, float]], gpus: int | None,
                          threads_per_policy: int | None) -> None:
    """Refuse what no placement can satisfy: no GPU count, a negative one, no policy, a duplicate name, a bad share."""
    if gpus is None:
        raise ValueError("plan_placement needs a GPU count; detect it at the call site (0 = CPU)")
    if gpus < 0:
        raise PlacementError(f"--gpus must be >= 0, got {gpus}")
    if not policies:
        raise PlacementError("cannot place an empty pool: it has no policies")
    names = [name for name, _ in policies]
    if len(set(names)) != len(names):
        raise PlacementError(f"duplicate policy names in the pool: {names}")
    for name, share in policies:
        if not share > 0 or math.isinf(share):
            raise PlacementError(f"policy {name!r}: device_share must be a positive number, got {share}")
    if threads_per_policy is not None and threads_per_policy < 1:
        raise PlacementError(f"launch.threads_per_policy must be >= 1, got {threads_per_policy}")


def _place_on_cpu(
    policies: Sequence[tuple[str, float]],
    cores: int,
    device_map: Mapping[str, Sequence[int]] | None,
    threads_per_policy: int | None,
    cpu_processes: int,
) -> Placement:
    """No GPU: ``cpu_processes`` ranks per policy, the cores split evenly (warning when they are oversubscribed)."""
    if device_map:
        raise PlacementError(
            "--device-map pins policies to GPUs, but no GPU is available (gpus=0); drop --device-map to "
            "run every policy on the CPU, or run on a machine with GPUs"
        )
    warnings: list[str] = []
    threads = [threads_per_policy] * len(policies) if threads_per_policy else cpu_thread_split(policies, cores)
    if sum(threads) > cores:
        warnings.append(
            f"{len(policies)} policies x {max(threads)} threads = {sum(threads)} threads on "
            f"{cores} CPU cores: the processes will compete for cores (set launch.threads_per_policy)"
        )
    placed = [PolicyPlacement(name, "cpu", (), cpu_processes, count, share)
              for (name, share), count in zip(policies, threads, strict=True)]
    return Placement(placed, 0, cores, explicit=False, warnings=warnings)


def cpu_thread_split(policies: Sequence[tuple[str, float]], cores: int) -> list[int]:
    """MWRA on a CPU, where the resource is cores: each policy's threads in proportion to its ``device_share``
    (floor of ``cores x share / total``, at least one). In a lock-step pool (SGT, XGRPO, PRP) every step waits for
    the slowest policy, so a policy whose step costs more (a larger model) should get more cores: say so with
    ``device_share``. Equal shares split the cores evenly, as before shares counted here."""
    total = sum(share for _, share in policies)
    return [max(1, math.floor(cores * share / total + 1e-9)) for _, share in policies]


def _explicit_blocks(
    names: list[str], gpus: int, device_map: Mapping[str, Sequence[int]]
) -> tuple[dict[str, list[int]], list[int], list[str]]:
    """The user's device map, checked: ({policy: gpu ids}, idle GPUs, warnings)."""
    blocks, warnings = check_device_map(names, gpus, device_map)
    idle = sorted(set(range(gpus)) - {d for block in blocks.values() for d in block})
    if idle:
        warnings.append(f"GPUs {_ids(idle)} are not used by the device map")
    return blocks, idle, warnings


def _even_blocks(
    policies: Sequence[tuple[str, float]], gpus: int, world_size_ok: Callable[[str, int], bool] | None
) -> tuple[dict[str, list[int]], list[int], list[str]]:
    """The default split: contiguous blocks by device_share, each shrunk to a world size its batch allows."""
    names = [name for name, _ in policies]
    if len(policies) > gpus:
        raise PlacementError(
            f"cannot place {len(policies)} policies on {gpus} GPU{'s' if gpus != 1 else ''}: each policy "
            f"needs at least one GPU; use --device-map to share GPUs (e.g. "
            f"'{names[0]}=0;{names[1]}=0') or run on more GPUs"
        )
    warnings: list[str] = []
    shares = [share for _, share in policies]
    counts = apportion(shares, gpus)
    if world_size_ok is not None:
        counts, warnings = _fit_world_sizes(names, counts, world_size_ok)
        counts = _regrow(names, shares, counts, gpus, world_size_ok)
        if gpus > sum(counts):
            warnings.append(f"{gpus - sum(counts)} GPU(s) left idle: no policy's batch divides across more. Adjust "
                            "`batch` or device_share, or pass --device-map to use them")
    blocks, start = {}, 0
    for name, count in zip(names, counts, strict=True):
        blocks[name] = list(range(start, start + count))
        start += count
    return blocks, list(range(start, gpus)), warnings


def apportion(shares: Sequence[float], seats: int) -> list[int]:
    """Split ``seats`` GPUs by ``shares`` (largest remainder, every share at least 1).

    Ties go to the earlier policy, so the split is deterministic. Requires
    ``seats >= len(shares)``.
    """
    n = len(shares)
    if seats < n:
        raise ValueError(f"cannot give {n} shares at least one of {seats} seats")
    total = float(sum(shares))
    quotas = [seats * s / total for s in shares]
    counts = [max(1, math.floor(q)) for q in quotas]
    # Raising zeros to one can overshoot: take back from the most over-served share first.
    while sum(counts) > seats:
        candidates = [i for i in range(n) if counts[i] > 1]
        worst = max(candidates, key=lambda i: (counts[i] - quotas[i], -i))
        counts[worst] -= 1
    while sum(counts) < seats:
        best = max(range(n), key=lambda i: (quotas[i] - counts[i], -i))
        counts[best] += 1
    return counts


def _fit_world_sizes(
    names: Sequence[str], counts: Sequence[int], ok: Callable[[str, int], bool]
) -> tuple[list[int], list[str]]:
    fitted, warnings = [], []
    for name, count in zip(names, counts, strict=True):
        usable = next((n for n in range(count, 0, -1) if ok(name, n)), None)
        if usable is None:
            # Not even one GPU works: batching will raise the precise error later.
            usable = count
        elif usable < count:
            warnings.append(
                f"{name!r}: its batch does not divide across its share of {count} GPUs; using {usable}"
            )
        fitted.append(usable)
    return fitted, warnings


def _regrow(names: Sequence[str], shares: Sequence[float], counts: Sequence[int], gpus: int,
            ok: Callable[[str, int], bool]) -> list[int]:
    """Give GPUs that shrinking left idle back to policies that can use them: the most under-served by share
    first, each to the largest world size its batch allows (3 policies on 8 GPUs, 3+3+2 shrunk to 2+2+2 because
    3 does not divide the batch: the two idle GPUs go to one policy, 4+2+2, instead of staying idle)."""
    counts, total = list(counts), float(sum(shares))
    while (idle := gpus - sum(counts)) > 0:
        order = sorted(range(len(counts)), key=lambda i: (counts[i] - gpus * shares[i] / total, i))
        grown = next(((i, n) for i in order for n in range(counts[i] + idle, counts[i], -1) if ok(names[i], n)), None)
        if grown is None:
            return counts
        counts[grown[0]] = grown[1]
    return counts


def check_device_map(
    names: Sequence[str], gpus: int, device_map: Mapping[str, Sequence[int]]
) -> tuple[dict[str, list[int]], list[str]]:
    unknown = [key for key in device_map if key not in names]
    if unknown:
        raise PlacementError(
            f"--device-map names {', '.join(repr(k) for k in unknown)}, which "
            f"{'is' if len(unknown) == 1 else 'are'} not in the pool (policies: {', '.join(names)})"
        )
    missing = [name for name in names if name not in device_map]
    if missing:
        raise PlacementError(
            f"--device-map does not place {', '.join(repr(m) for m in missing)}; an explicit map must give every "
            f"policy its GPUs (pool: {', '.join(names)})"
        )
    blocks: dict[str, list[int]] = {}
    owners: dict[int, list[str]] = {}
    for name in names:
        ids = list(device_map[name])
        if not ids:
            raise PlacementError(f"--device-map gives {name!r} no GPU; list at least one id (0..{gpus - 1})")
        bad = [i for i in ids if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < gpus]
        if bad:
            raise PlacementError(
                f"--device-map gives {name!r} GPU id(s) {bad}, but only ids 0..{gpus - 1} exist ({gpus} GPUs)"
            )
        if len(set(ids)) != len(ids):
            raise PlacementError(f"--device-map lists a GPU twice for {name!r}: {ids}")
        blocks[name] = ids
        for i in ids:
            owners.setdefault(i, []).append(name)
    warnings = [
        f"GPU {gpu} is shared by {', '.join(sharing)} (explicit device map): their memory must fit together"
        for gpu, sharing in sorted(owners.items())
        if len(sharing) > 1
    ]
    return blocks, warnings


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


def parse_device_map(text: str) -> dict[str, list[int]]:
    """``'qwen-a=0,1;qwen-b=2,3'`` (ranges allowed: ``qwen-a=0-3``) -> ``{'qwen-a': [0, 1], ...}``."""
    if not text or not text.strip():
        raise UsageError("--device-map is empty; expected e.g. 'policy-a=0,1;policy-b=2,3'")
    out: dict[str, list[int]] = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        if "=" not in part:
            raise UsageError(f"--device-map: {part!r} has no '='; expected NAME=IDS, e.g. 'policy-a=0,1'")
        name, ids_text = (s.strip() for s in part.split("=", 1))
        if not name:
            raise UsageError(f"--device-map: {part!r} has no policy name before '='")
        if name in out:
            raise UsageError(f"--device-map: policy {name!r} is listed twice")
        ids: list[int] = []
        for item in (i.strip() for i in ids_text.split(",")):
            if not item:
                raise UsageError(f"--device-map: {name!r} has an empty GPU id in {ids_text!r}")
            try:
                if "-" in item:
                    lo, hi = (int(x) for x in item.split("-", 1))
                    if lo > hi:
                        raise UsageError(f"--device-map: {name!r}: range {item!r} runs backwards")
                    ids.extend(range(lo, hi + 1))
                else:
                    ids.append(int(item))
            except ValueError:
                raise UsageError(
                    f"--device-map: {name!r}: {item!r} is not a GPU id (expected integers like 0,1 or a range 0-3)"
                ) from None
        if any(i < 0 for i in ids):
            raise UsageError(f"--device-map: {name!r}: GPU ids must be >= 0, got {ids}")
        out[name] = ids
    if not out:
        raise UsageError("--device-map names no policy; expected e.g. 'policy-a=0,1;policy-b=2,3'")
    return out

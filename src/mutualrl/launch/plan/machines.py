"""MWRA over several machines (``launch.nodes``): which machines, and which GPUs on them, each policy gets.

Pure functions, like :func:`~mutualrl.launch.plan.mwra.plan_placement` (which places a pool on one
machine and is reused here for each machine's share of the pool):

- **As many policies as machines or more**: the pool is cut, in pool order, into ``nodes``
  contiguous groups as even as possible (3 policies on 2 machines: 2 + 1), and each machine's
  GPUs (or CPU cores) are split among its group exactly as on one machine (``device_share``,
  batch fit, idle GPUs).
- **Fewer policies than machines**: each policy gets whole machines, apportioned by
  ``device_share`` (1 policy on 2 machines spans both; 2 on 4: two each), and the same GPUs
  on each of them (accelerate and torchrun start the same number of processes on every
  machine of a group).
- **Explicit device map**: GPU ids are global, machine ``k`` owns ``k*gpus .. k*gpus+gpus-1``
  (``'a=0-7;b=8-15'`` on 2 machines of 8 GPUs); a policy may span machines if it has the same
  number of GPUs on each.

GPU ids in the placement are global; :func:`local_devices` gives one machine's ids (what its
``CUDA_VISIBLE_DEVICES`` is built from). One machine (``nodes == 1``) is exactly
:func:`~mutualrl.launch.plan.mwra.plan_placement`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from mutualrl.errors import PlacementError
from mutualrl.launch.plan.mwra import Placement, PolicyPlacement, check_device_map, apportion, plan_placement


def local_devices(placed: PolicyPlacement, machine: int, gpus: int) -> tuple[int, ...]:
    """The policy's GPU ids on ``machine`` (local ids ``0..gpus-1``); one machine: its devices as they are."""
    if gpus <= 0:
        return ()
    return tuple(d % gpus for d in placed.devices if d // gpus == machine)


def machine_groups(shares: Sequence[float], nodes: int) -> list[tuple[int, ...]]:
    """The machines of each policy (pool order): contiguous groups of policies per machine, or whole machines
    per policy when there are fewer policies than machines."""
    count = len(shares)
    if count >= nodes:
        sizes = apportion([1.0] * nodes, count)  # policies per machine, ties to the earlier machine
        return [(machine,) for machine, size in enumerate(sizes) for _ in range(size)]
    counts, start, out = apportion(shares, nodes), 0, []
    for size in counts:
        out.append(tuple(range(start, start + size)))
        start += size
    return out


def plan_placement_nodes(
    policies: Sequence[tuple[str, float]],
    gpus: int | None,
    nodes: int = 1,
    device_map: Mapping[str, Sequence[int]] | None = None,
    cpu_cores: int | None = None,
    threads_per_policy: int | None = None,
    world_size_ok: Callable[[str, int], bool] | None = None,
    cpu_processes: int = 1,
) -> Placement:
    """:func:`~mutualrl.launch.plan.mwra.plan_placement` for ``nodes`` machines of ``gpus`` GPUs (and ``cpu_cores``) each."""
    if nodes < 1:
        raise PlacementError(f"--nodes must be >= 1, got {nodes}")
    kwargs = dict(cpu_cores=cpu_cores, threads_per_policy=threads_per_policy, cpu_processes=cpu_processes)
    if nodes == 1:
        return plan_placement(policies, gpus, device_map=device_map, world_size_ok=world_size_ok, **kwargs)
    if gpus is None:
        raise ValueError("plan_placement_nodes needs a GPU count per machine; detect it at the call site (0 = CPU)")
    if device_map and gpus > 0:
        return _explicit(policies, gpus, nodes, device_map, cpu_cores, threads_per_policy)
    if not policies:
        raise PlacementError("cannot place an empty pool: it has no policies")
    groups = machine_groups([share for _, share in policies], nodes)
    placed: list[PolicyPlacement] = []
    warnings: list[str] = []
    idle: list[int] = []
    cores = max(1, cpu_cores or 1)
    for machine in range(nodes):
        members = [p for p, machines in zip(policies, groups, strict=True) if machines == (machine,)]
        spanning = [(p, machines) for p, machines in zip(policies, groups, strict=True)
                    if len(machines) > 1 and machines[0] == machine]
        if members:
            try:
                sub = plan_placement(members, gpus, device_map=device_map, world_size_ok=world_size_ok, **kwargs)
            except PlacementError as err:
                raise PlacementError(f"machine {machine} of {nodes} (policies {', '.join(n for n, _ in members)}): "
                                     f"{err}") from None
            offset = machine * gpus
            placed += [replace(p, devices=tuple(d + offset for d in p.devices), machines=(machine,))
                       for p in sub.policies]
            warnings += [f"machine {machine}: {w}" for w in sub.warnings]
            idle += [d + offset for d in sub.idle_gpus]
        for (name, share), machines in spanning:
            per_machine = _spanning_size(name, gpus, len(machines), world_size_ok, warnings)
            devices = tuple(m * gpus + d for m in machines for d in range(per_machine))
            idle += [m * gpus + d for m in machines for d in range(per_machine, gpus)]
            ranks = per_machine if gpus > 0 else cpu_processes
            threads = threads_per_policy or cores
            placed.append(PolicyPlacement(name, "cuda" if gpus > 0 else "cpu", devices, ranks * len(machines),
                                          threads, share, machines))
    order = {name: i for i, (name, _) in enumerate(policies)}
    placed.sort(key=lambda p: order[p.name])
    return Placement(placed, gpus, cores, explicit=False, idle_gpus=sorted(idle), warnings=warnings, nodes=nodes)


def _spanning_size(name: str, gpus: int, machines: int, ok: Callable[[str, int], bool] | None,
                   warnings: list[str]) -> int:
    """GPUs per machine for a policy spanning ``machines`` whole machines (the batch must split over them all)."""
    if gpus == 0 or ok is None:
        return gpus
    usable = next((g for g in range(gpus, 0, -1) if ok(name, g * machines)), None)
    if usable is None:
        return gpus  # not even one GPU per machine works: batching raises the precise error later
    if usable < gpus:
        warnings.append(f"{name!r}: its batch does not divide across {machines} x {gpus} GPUs; using {usable} per "
                        f"machine ({gpus - usable} left idle on each). Adjust `batch` or pass --device-map")
    return usable


def _explicit(policies: Sequence[tuple[str, float]], gpus: int, nodes: int, device_map: Mapping[str, Sequence[int]],
              cpu_cores: int | None, threads_per_policy: int | None) -> Placement:
    names = [name for name, _ in policies]
    blocks, warnings = check_device_map(names, gpus * nodes, device_map)
    cores = max(1, cpu_cores or 1)
    placed = []
    for name, share in policies:
        per_machine: dict[int, int] = {}
        for device in blocks[name]:
            per_machine[device // gpus] = per_machine.get(device // gpus, 0) + 1
        if len(set(per_machine.values())) > 1:
            listing = ", ".join(f"{n} on machine {m}" for m, n in sorted(per_machine.items()))
            raise PlacementError(f"--device-map gives {name!r} {listing}: a policy spanning machines needs the same "
                                 "number of GPUs on each (accelerate and torchrun start as many processes on every "
                                 f"machine); ids are global, machine k has {gpus}*k .. {gpus}*k+{gpus - 1}")
        machines = tuple(sorted(per_machine))
        sharing = max(1, sum(1 for other in names if set(blocks[other]) & {m * gpus + d for m in machines
                                                                           for d in range(gpus)}))
        threads = threads_per_policy or max(1, cores // sharing)
        placed.append(PolicyPlacement(name, "cuda", tuple(blocks[name]), len(blocks[name]), threads, share, machines))
    used = {d for block in blocks.values() for d in block}
    idle = sorted(set(range(gpus * nodes)) - used)
    if idle:
        warnings.append(f"GPUs {','.join(map(str, idle))} are not used by the device map (global ids)")
    return Placement(placed, gpus, cores, explicit=True, idle_gpus=idle, warnings=warnings, nodes=nodes)

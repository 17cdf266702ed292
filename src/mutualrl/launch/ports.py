"""The rendezvous ports a run holds on its machine, so two runs started there at once never plan the same ones.

Each policy's process group meets on a port (``launch.main_process_port`` + the policy's index: torch's TCPStore,
torchrun's rendezvous, DeepSpeed's ``MASTER_PORT``). Two ``mutualrl train`` started together on one machine both
planned 29500, 29501, ...; the second's first rank died with ``DistNetworkError ... EADDRINUSE``. Before planning,
a launcher now claims a block of ports and holds the claim until its run ends:

- a claim is an abstract Unix socket named after the port (Linux's abstract namespace: no file, gone with the
  process however it ends); a second launcher cannot bind the same name, so it moves on to the next block
  (elsewhere there is no claim, only the check below);
- a port is taken only where a TCP socket binds it on every address with ``SO_REUSEADDR`` (as torch's TCPStore
  binds), so a port another program listens on is skipped.

On one machine the first free block from the recipe's port up is used (the plan records it); a run over several
machines keeps the recipe's ports, the ones every machine planned, and only checks them here.
"""

from __future__ import annotations

import errno
import socket
import sys
from dataclasses import dataclass, field, replace

from mutualrl.config.schema import RunConfig
from mutualrl.errors import PlacementError

PORT_WINDOW = 256
"""How far above the recipe's port a launcher looks for a free block."""
CLAIM_PREFIX = "mutualrl-rendezvous-port-"
ABSTRACT_SOCKETS = sys.platform.startswith("linux")
"""Linux's abstract socket namespace holds the claims; elsewhere a port is only checked to be bindable."""


@dataclass
class PortClaim:
    """``count`` consecutive ports from ``first``, held from other mutualrl runs on this machine until closed."""

    first: int
    count: int
    held: list[socket.socket] = field(default_factory=list, repr=False)

    def close(self) -> None:
        for sock in self.held:
            sock.close()
        self.held.clear()

    def __enter__(self) -> PortClaim:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def port_bindable(port: int) -> bool:
    """Whether a TCP listener could bind ``port`` on every address here (IPv4, and IPv6 where there is one)."""
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((address, port))
        except OSError as err:
            if family == socket.AF_INET6 and err.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                continue  # no IPv6 on this machine
            return False
    return True


def claim_port(port: int) -> socket.socket | None:
    """Hold ``port`` for this process (an abstract Unix socket named after it); None: another run holds it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind("\0" + CLAIM_PREFIX + str(port))
    except OSError:
        sock.close()
        return None
    return sock


def claim_block(first: int, count: int) -> PortClaim | None:
    """``count`` ports from ``first``, each claimed and bindable; None (nothing held) when one is not."""
    claim = PortClaim(first, count)
    for port in range(first, first + count):
        if ABSTRACT_SOCKETS:
            held = claim_port(port) if port <= 65535 else None
            if held is None:
                claim.close()
                return None
            claim.held.append(held)
        if port > 65535 or not port_bindable(port):
            claim.close()
            return None
    return claim


def claim_ports(first: int, count: int, fixed: bool = False) -> PortClaim:
    """The first block of ``count`` free ports from ``first`` up (``fixed``: exactly ``first``'s), claimed;
    :class:`~mutualrl.errors.PlacementError` in one line when there is none."""
    last = first if fixed else min(first + PORT_WINDOW, 65536 - count)
    for start in range(first, last + 1):
        claim = claim_block(start, count)
        if claim is not None:
            return claim
    where = f"{first}-{first + count - 1}" if fixed else f"{first}-{last + count - 1}"
    raise PlacementError(
        f"no {count} free rendezvous port(s) {'at' if fixed else 'in'} {where} on this machine (in use, or held by "
        f"another mutualrl run): set launch.main_process_port to a free range" + (
            " on every machine" if fixed else ""))


def claim_run_ports(config: RunConfig) -> tuple[RunConfig, PortClaim]:
    """Claim the run's rendezvous ports (one per policy) for its launch; returns the config planning them and the
    claim, to hold until the run ends (module docstring)."""
    launch = config.launch
    claim = claim_ports(int(launch.main_process_port), len(config.pool.policies), fixed=launch.nodes > 1)
    if claim.first == launch.main_process_port:
        return config, claim
    return replace(config, launch=replace(launch, main_process_port=claim.first)), claim

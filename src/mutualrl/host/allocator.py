"""glibc allocator settings for the processes that train: freed large buffers kept for reuse, not faulted in again.

By default glibc serves every allocation of 32 MiB or more with its own ``mmap`` and gives it back with
``munmap`` when freed (its dynamic threshold never rises above 32 MiB), and trims its heap's free top back
to the kernel at 128 KiB. A training step allocates and frees the same large tensors every step (logits,
activations, gradients), so each one was faulted in again, page by page: a 20-step run of the ``tiny`` pool
spent 13.5 s of its 35 s of CPU in the kernel with 7 M minor faults (benchmarks/allocator.py). With
allocations below 1 GiB kept in the heap and its free top kept up to 1 GiB, the same buffers are reused.

Both are environment variables glibc reads when a process starts, so they are given to the processes
the launcher and the set-up start (``launch/plan/commands.py``, ``pools/tiny.py``); a variable the user
set, or the same tunable in ``GLIBC_TUNABLES``, is left as it is. Other C libraries ignore them.
"""

from __future__ import annotations

from collections.abc import Mapping

_GIB = str(1 << 30)

#: variable -> (value, its name in ``GLIBC_TUNABLES``). Allocations of 1 GiB or more still go straight to
#: the kernel and back (a one-off huge buffer is not kept); at most 1 GiB of free heap top is kept.
ALLOCATOR_SETTINGS: dict[str, tuple[str, str]] = {
    "MALLOC_MMAP_THRESHOLD_": (_GIB, "glibc.malloc.mmap_threshold"),
    "MALLOC_TRIM_THRESHOLD_": (_GIB, "glibc.malloc.trim_threshold"),
}


def allocator_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The allocator variables to add to a child of a process whose environment is ``environ``.

    A variable already in ``environ`` (whatever its value, empty too) or named in its ``GLIBC_TUNABLES`` is
    the user's choice and is not added, so the child inherits it unchanged.
    """
    tunables = environ.get("GLIBC_TUNABLES", "")
    named = {entry.split("=", 1)[0].strip() for entry in tunables.split(":") if entry.strip()}
    return {
        variable: value
        for variable, (value, tunable) in ALLOCATOR_SETTINGS.items()
        if variable not in environ and tunable not in named
    }

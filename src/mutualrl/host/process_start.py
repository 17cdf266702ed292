"""Starting a process that imports torch, transformers and TRL: the imports without the garbage collector.

Those imports allocate about a million objects that live as long as the process. CPython's cyclic collector
runs a pass every few hundred allocations and, now and then, a full pass over everything allocated so far,
so the imports pay for scanning their own objects again and again (benchmarks/results/worker-start.md:
the collector's share of a worker's imports, measured side by side). Turning it off for the imports, then
freezing what they made (``gc.freeze``: later passes skip it), saves that and changes nothing else: the
collector is on again before the first model is built.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused_for_imports() -> Iterator[None]:
    """The collector off inside the block until :func:`imports_done`; on again when the block ends, whatever
    happened (an error before the imports finished: back on, nothing frozen)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled and not gc.isenabled():
            gc.enable()


def imports_done() -> None:
    """Inside :func:`collector_paused_for_imports`: move every object that exists now (the imported modules) to
    the permanent generation and turn the collector back on, so later passes scan only what training makes."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()

"""Decisions every rank of a policy must share, taken on rank 0 and broadcast to the others.

A rank that decides from the file system (does a validation result exist, what step a checkpoint holds) can see
what another does not: on a shared file system (NFS's attribute cache) one rank finds a file rank 0 wrote and the
next does not yet. Ranks that decide differently then enter different collectives (one validates and gathers,
the other trains on) and wait for each other forever. So each such decision is made once, on rank 0
(:func:`decided_on_rank_zero`), and every rank goes on from the same answer, or raises the same error.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def decided_on_rank_zero(accelerator: Any, decide: Callable[[], T]) -> T:
    """``decide()`` on rank 0 of this policy, its result (or its error, raised on every rank) broadcast to all.

    ``accelerator`` is accelerate's ``Accelerator`` (``num_processes``, ``is_main_process``); a collective where
    there are several ranks, so every rank calls it at the same point."""
    if accelerator.num_processes == 1:
        return decide()
    from accelerate.utils import broadcast_object_list

    answer: list[Any] = [None]
    if accelerator.is_main_process:
        try:
            answer = [("value", decide())]
        except Exception as err:  # every rank raises it, instead of rank 0 alone while the others wait
            answer = [("error", err if _picklable(err) else RuntimeError(f"{type(err).__name__}: {err}"))]
    broadcast_object_list(answer, from_process=0)
    kind, value = answer[0]
    if kind == "error":
        raise value
    return value


def _picklable(value: Any) -> bool:
    try:
        pickle.loads(pickle.dumps(value))
    except Exception:
        return False
    return True

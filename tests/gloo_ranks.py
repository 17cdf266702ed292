"""Run a function on two CPU ranks joined by gloo, each with accelerate's ``Accelerator``, inside the test process.

The ranks are forked from the test (no second import of torch, transformers and TRL: about a second instead of
ten), each with accelerate's state reset, so an ``Accelerator`` built earlier in this worker does not leak in.
A rank that raises, or a pair that hangs in mismatched collectives, fails the test with what each rank said.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import traceback
from collections.abc import Callable
from typing import Any

from e2e_helpers import free_ports

RANKS = 2


def _rank_main(rank: int, port: int, function: Callable[..., Any], args: tuple, results: Any) -> None:
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(RANKS),
                       "LOCAL_WORLD_SIZE": str(RANKS), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "GLOO_SOCKET_IFNAME": "lo", "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"})
    try:
        import torch
        from accelerate import Accelerator
        from accelerate.state import AcceleratorState, GradientState, PartialState

        torch.set_num_threads(1)
        AcceleratorState._reset_state(reset_partial_state=True)
        PartialState._reset_state()
        GradientState._reset_state()
        accelerator = Accelerator(cpu=True)
        assert accelerator.num_processes == RANKS, accelerator.state
        results.put((rank, "ok", function(accelerator, *args)))
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    except BaseException:  # reported to the test, which fails with it
        results.put((rank, "error", traceback.format_exc()))
    finally:
        results.close()
        results.join_thread()  # the answer is in the pipe before the process ends
        os._exit(0)  # a forked child of pytest: no atexit handlers, no second teardown of the parent's state


def run_on_two_ranks(function: Callable[..., Any], *args: Any, timeout_s: float = 60.0) -> list[Any]:
    """``function(accelerator, *args)`` on ranks 0 and 1; its return values by rank (picklable)."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    port = free_ports(1)
    processes = [context.Process(target=_rank_main, args=(rank, port, function, args, results)) for rank in range(RANKS)]
    for process in processes:
        process.start()
    answers: dict[int, tuple[str, Any]] = {}
    try:
        while len(answers) < RANKS:
            rank, kind, value = results.get(timeout=timeout_s)
            answers[rank] = (kind, value)
            if kind == "error":
                break
    except queue.Empty:
        pass
    finally:
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
    errors = [f"rank {rank}: {value}" for rank, (kind, value) in sorted(answers.items()) if kind == "error"]
    missing = [rank for rank in range(RANKS) if rank not in answers]
    assert not errors and not missing, "\n".join(errors) + (
        f"\nranks {missing} gave no answer within {timeout_s:.0f} s (waiting in a collective the other rank "
        "never entered?)" if missing else "")
    return [answers[rank][1] for rank in range(RANKS)]

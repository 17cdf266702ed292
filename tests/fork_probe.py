"""Run by ``tests/test_fork_server.py`` as ``python -m fork_probe ACTION ...`` in a zygote's child (or, after
``restart_fresh``, in a fresh interpreter): prints what the process sees as one JSON line, then does ACTION."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from zygotes import child as forked_child


def report() -> None:
    umask = os.umask(0)
    os.umask(umask)
    print(json.dumps({
        "pid": os.getpid(), "sid": os.getsid(0), "cwd": os.getcwd(), "argv": sys.argv[1:], "name": __name__,
        "forked": forked_child.forked(), "probe": os.environ.get("PROBE"), "runtime": os.environ.get("MUTUALRL_PROBE"),
        "torch_imported": "torch" in sys.modules, "vllm_blocked": "vllm" in sys.modules and sys.modules["vllm"] is None,
        "umask": umask, "stdin": sys.stdin.read(), "path": sys.path,
        "ignored": [int(s) for s in (signal.SIGINT, signal.SIGUSR1, signal.SIGTERM) if signal.getsignal(s) is signal.SIG_IGN],
        "python_sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
    }), flush=True)


def act(action: str, value: str | None) -> None:
    if action == "exit":
        sys.exit(int(value or 0))
    if action == "sleep":
        time.sleep(60)
    if action == "raise":
        raise RuntimeError("the probe failed on purpose")
    if action == "fresh" and forked_child.forked():
        forked_child.restart_fresh()


if __name__ == "__main__":
    report()
    act(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)

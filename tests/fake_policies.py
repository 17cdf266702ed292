"""A fake policy process for the launcher's stop tests, and a runner that sends the stop once every policy stepped.

:data:`FAKE_POLICY` is a script: ``FAKE_POLICY RUN NAME PACE [SAVE_S [says-saving]]`` steps every ``PACE`` seconds,
writing its status as the status callback does (holding, as ``StopCallback.due`` does, while a request names no step
yet), and at the step the launcher's stop request names it "saves" for
``SAVE_S`` seconds (saying ``saving`` in its status first with ``says-saving``, as ``MutualGRPOTrainer`` does),
leaves ``RUN/NAME.saved`` holding the step and exits as a stopped worker exits."""

from __future__ import annotations

from mutualrl.launch.supervise.runner import PoolRunner

FAKE_POLICY = """
import sys, time
from pathlib import Path
from mutualrl.atomic_io import write_json_atomic
from mutualrl.run_folder import RunPaths
from mutualrl.training.stop_request import HOLDING, STEP_WAIT_S, STOPPED_EXIT, read_request, requested_step

paths, name, pace = RunPaths(Path(sys.argv[1])), sys.argv[2], float(sys.argv[3])
save_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
says_saving = sys.argv[5:] == ["says-saving"]
step = 0
while True:  # a step, its status, then the request (as the status and stop callbacks do); the save takes save_s
    time.sleep(pace)
    step += 1
    write_json_atomic(paths.status(name), {"step": step, "phase": "training"})
    request = read_request(paths)
    target = requested_step(request)
    if request is not None and target is None:  # the launcher is naming the step: hold here, as StopCallback.due
        write_json_atomic(paths.status(name), {"step": step, "phase": HOLDING})
        deadline = time.monotonic() + STEP_WAIT_S
        while target is None and time.monotonic() < deadline:
            time.sleep(0.05)
            target = requested_step(read_request(paths))
    if request is not None and (target is None or step >= target):  # no step named in time: stop here, as it does
        if says_saving:
            write_json_atomic(paths.status(name), {"step": step, "phase": "saving"})
        time.sleep(save_s)
        (paths.root / f"{name}.saved").write_text(str(step))
        sys.exit(STOPPED_EXIT)
"""


class StoppedAtStep(PoolRunner):
    """Raises KeyboardInterrupt (a stop signal) once every policy has completed ``at`` steps."""

    def __init__(self, *args, at: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.at, self.interrupted = at, False

    def _merge(self):
        if not self.interrupted and all(self._status_of(p.name).get("step", 0) >= self.at for p in self.procs):
            self.interrupted = True
            raise KeyboardInterrupt
        return super()._merge()

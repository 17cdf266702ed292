"""With several machines one launcher (machine 0's) decides the stop step and the others read it: two launchers
whose views of the shared status files differ (NFS's attribute cache) would otherwise name two steps. Shown with a
test double of the shared folder: each machine's reads of it lag behind the writes."""

from __future__ import annotations

from mutualrl.run_folder import RunPaths
from mutualrl.training.stop_request import follow_stop, read_request, request_stop


def lagging(reads_behind: int):
    """A machine's reader of the request that sees nothing for its first ``reads_behind`` reads."""
    seen = {"reads": 0}

    def read(paths: RunPaths):
        seen["reads"] += 1
        return None if seen["reads"] <= reads_behind else read_request(paths)
    return read


# policy a trains on machine 0, b on machine 1; each machine sees its own policy's status fresh, the other's lagging
MACHINE_0_VIEW = {"a": {"step": 7, "phase": "training"}, "b": {"step": 5, "phase": "training"}}
MACHINE_1_VIEW = {"a": {"step": 6, "phase": "training"}, "b": {"step": 6, "phase": "training"}}


def test_two_deciding_machines_name_two_steps(tmp_path):
    """What each launcher deciding from its own view did: machine 0 asks for 8, machine 1 then overwrites it with 7."""
    paths = RunPaths(tmp_path)
    paths.status_dir.mkdir(parents=True)
    assert request_stop(paths, "SIGTERM", lambda: MACHINE_0_VIEW) == 8
    assert request_stop(paths, "SIGTERM", lambda: MACHINE_1_VIEW) == 7  # a worker that read 8 saves another step


def test_machine_0_decides_and_a_machine_whose_view_lags_reads_its_step(tmp_path):
    paths = RunPaths(tmp_path)
    paths.status_dir.mkdir(parents=True)
    decided_here = []
    assert request_stop(paths, "SIGTERM", lambda: MACHINE_0_VIEW) == 8
    step = follow_stop(paths, lambda: decided_here.append(1) or 0, read=lagging(3), poll_s=0.001)
    assert step == 8 and decided_here == [] and read_request(paths)["step"] == 8  # the file still names one step


def test_a_machine_that_hears_nothing_from_machine_0_decides_after_the_wait(tmp_path):
    """A Ctrl-C on machine 1 alone: machine 0 writes nothing, so machine 1 asks for the step itself."""
    paths = RunPaths(tmp_path)
    paths.status_dir.mkdir(parents=True)
    step = follow_stop(paths, lambda: request_stop(paths, "SIGINT", lambda: MACHINE_1_VIEW), wait_s=0.05,
                       poll_s=0.001)
    assert step == 7 and read_request(paths) == {"signal": "SIGINT", "step": 7}

"""With several machines one launcher (machine 0's) decides the stop step and the others read it: two launchers
whose views of the shared status files differ (NFS's attribute cache) would otherwise name two steps. Shown with a
test double of the shared folder: each machine's reads of it lag behind the writes. A machine that does not see
machine 0's request after its wait learns from an exclusive create (decided by the file server) that it exists, and
never overwrites it."""

from __future__ import annotations

from mutualrl.run_folder import RunPaths
from mutualrl.training.stop_request import claim_request, follow_stop, read_request, request_stop


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
                       poll_s=0.001, signal_name="SIGINT")
    assert step == 7 and read_request(paths) == {"signal": "SIGINT", "step": 7}


def test_a_machine_whose_view_lags_past_its_wait_never_overwrites_machine_0s_step(tmp_path):
    """NFS with default mounts: machine 1 may not see machine 0's new file for up to 60 s (a cached "no such file").
    Its exclusive create finds the file; it reads on and takes machine 0's step, deciding nothing."""
    paths = RunPaths(tmp_path)
    paths.status_dir.mkdir(parents=True)
    decided_here, said = [], []
    assert request_stop(paths, "SIGTERM", lambda: MACHINE_0_VIEW) == 8
    reader = lagging(200)  # far more reads than the first wait takes at 1 ms polling
    step = follow_stop(paths, lambda: decided_here.append(1) or request_stop(paths, "SIGTERM", lambda: MACHINE_1_VIEW),
                       read=reader, wait_s=0.02, poll_s=0.001, see_s=30.0, say=said.append)
    assert step == 8 and decided_here == [] and read_request(paths) == {"signal": "SIGTERM", "step": 8}
    assert len(said) == 1 and "does not see yet" in said[0] and "up to 30 s" in said[0]


def test_a_request_never_seen_stops_this_machines_workers_and_leaves_the_file(tmp_path):
    paths = RunPaths(tmp_path)
    paths.status_dir.mkdir(parents=True)
    assert request_stop(paths, "SIGTERM", lambda: MACHINE_0_VIEW) == 8
    step = follow_stop(paths, lambda: request_stop(paths, "SIGTERM", lambda: MACHINE_1_VIEW), read=lagging(10**9),
                       wait_s=0.01, poll_s=0.001, see_s=0.02)
    assert step == 0 and read_request(paths) == {"signal": "SIGTERM", "step": 8}  # 0: this machine stops at once


def test_the_exclusive_create_claims_only_a_missing_request(tmp_path):
    paths = RunPaths(tmp_path)
    paths.status_dir.mkdir(parents=True)
    assert claim_request(paths, "SIGINT") and read_request(paths) == {"signal": "SIGINT"}
    assert not claim_request(paths, "SIGTERM") and read_request(paths) == {"signal": "SIGINT"}

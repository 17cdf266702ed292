"""Several machines (launch.nodes): placement, per-machine commands, accelerate's multi-machine launch, coordination.

Pure planning (no process starts): `mutualrl train --dry-run --nodes N --gpus 8` as the CLI runs it, the
commands pushed through accelerate's own launch pipeline, and the join / session / report files the
launchers of several machines exchange in the run folder (each side run in a thread).
"""

from __future__ import annotations

import io
import json
import threading
import time

import pytest
from rich.console import Console

from mutualrl.errors import PlacementError, UsageError
from mutualrl.launch.plan.machines import local_devices, machine_groups, plan_placement_nodes
from mutualrl.launch.plan.render import render_plan
from mutualrl.launch.rundir.lock import RunLock
from mutualrl.launch.rundir.prepare import check_run_dir
from mutualrl.launch.supervise.nodes import (
    RemoteWatch,
    join_path,
    join_session,
    open_session,
    read_done,
    session_path,
)
from mutualrl.run_folder import RunPaths, machine_lock_name
from mutualrl.see.liveness import mark_policy_failed
from plan_helpers import dry_run
from test_launch_configs import accelerate_launch_env

MATH, QWEN3 = "qwen2.5-math-1.5b", "qwen3-1.7b-base"


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_two_machines_of_8_gpus_run_one_policy_each(tmp_path):
    plan = dry_run("2qwen", ["launch.nodes=2", "launch.main_address=10.0.0.1"], gpus=8, regime="sgt", run_dir=tmp_path,
                   write=True)
    assert plan.nodes == 2 and plan.placement.nodes == 2
    a, b = plan.policies
    assert (a.placement.machines, b.placement.machines) == ((0,), (1,))
    assert (a.placement.devices, b.placement.devices) == (tuple(range(8)), tuple(range(8, 16)))
    assert [s.policy for s in plan.specs_for(0)] == [MATH] and [s.policy for s in plan.specs_for(1)] == [QWEN3]
    for p, port in ((a, "29500"), (b, "29501")):
        spec = p.launch
        assert spec.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"  # each machine's own GPUs
        assert flag(spec.argv, "--num_processes") == "8" and flag(spec.argv, "--main_process_port") == port
        assert "--num_machines" not in spec.argv  # a policy on one machine meets there
        assert p.accelerate_config["num_machines"] == 1
        assert (p.grpo["per_device_train_batch_size"], p.grpo["gradient_accumulation_steps"]) == (10, 16)
    saved = json.loads((tmp_path / "launch" / "plan.json").read_text())
    assert saved["nodes"] == 2 and [p["placement"]["machines"] for p in saved["policies"]] == [[0], [1]]
    out = io.StringIO()
    render_plan(plan, Console(file=out, width=400))
    text = out.getvalue()
    assert "2 machines x 8 GPUs" in text and "## machine 0" in text and "## machine 1" in text
    assert text.index("## machine 1") < text.index(f"--policy {QWEN3}") and text.index(f"--policy {MATH}") < text.index(
        "## machine 1")


def test_a_policy_spanning_machines_meets_at_its_first_machine(tmp_path):
    plan = dry_run("2qwen", ["launch.nodes=4", "launch.main_address=10.0.0.1"], gpus=8, run_dir=tmp_path, write=True)
    a, b = plan.policies
    assert (a.placement.machines, b.placement.machines) == ((0, 1), (2, 3))
    assert a.placement.num_processes == 16 and a.grpo["gradient_accumulation_steps"] == 8  # 1024 prompts / (2 x 16)
    assert [s.machine for s in a.commands] == [0, 1] and [s.policy for s in plan.specs_for(3)] == [QWEN3]
    assert a.accelerate_config["main_process_ip"] == "10.0.0.1" and "main_process_ip" not in b.accelerate_config
    assert a.accelerate_config["deepspeed_config"]["deepspeed_multinode_launcher"] == "standard"
    on1 = a.commands[1]
    assert [flag(on1.argv, f) for f in ("--num_machines", "--machine_rank", "--main_process_ip", "--gpu_ids")] == [
        "2", "1", "10.0.0.1", "0,1,2,3,4,5,6,7"]
    assert on1.log_path.endswith(f"logs/{MATH}.machine-1.log")
    assert flag(b.commands[0].argv, "--main_process_ip") == "<address of machine 2>"  # known once machine 2 joined
    # accelerate turns each machine's command into a torchrun node of one 16-process group
    args, env = accelerate_launch_env(on1.argv[3:])
    assert (args.nnodes, args.node_rank, args.nproc_per_node, args.rdzv_backend, args.rdzv_endpoint) == (
        "2", 1, "8", "static", "10.0.0.1:29500")  # torchrun's static rendezvous at the policy's first machine
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7" and env["ACCELERATE_USE_DEEPSPEED"] == "true"


def test_addresses_of_joined_machines_fill_in_the_meeting_point(tmp_path):
    from mutualrl.config.loader import load_run_config
    from mutualrl.launch.plan.launch_plan import make_launch_plan

    config = load_run_config("2qwen", ["launch.nodes=4", "launch.machine_rank=3", "launch.deepspeed=none"]).config
    plan = make_launch_plan(config, tmp_path, gpus=8, simulate=True, addresses={2: "10.0.0.3"})
    plan.write()  # (machine 0 writes the config files)
    (spec,) = plan.specs  # machine 3 runs the second half of qwen3's group
    assert (spec.policy, spec.machine) == (QWEN3, 3)
    args, env = accelerate_launch_env(spec.argv[3:])
    assert (args.nnodes, args.node_rank, args.rdzv_endpoint) == ("2", 1, "10.0.0.3:29501")
    assert args.multi_gpu and env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"


def test_explicit_device_map_uses_global_ids(tmp_path):
    text = f"{MATH}=0-3,8-11;{QWEN3}=4-7,12-15"
    plan = dry_run("2qwen", ["launch.nodes=2"], gpus=8, device_map_text=text, run_dir=tmp_path)
    a, b = plan.policies
    assert a.placement.machines == b.placement.machines == (0, 1) and a.placement.num_processes == 8
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in b.commands] == ["4,5,6,7", "4,5,6,7"]
    assert [flag(s.argv, "--machine_rank") for s in b.commands] == ["0", "1"]
    assert flag(b.commands[1].argv, "--main_process_ip") == "127.0.0.1"  # machine 0: --main-address
    with pytest.raises(PlacementError, match="same number of GPUs on each"):
        dry_run("2qwen", ["launch.nodes=2"], gpus=8, device_map_text=f"{MATH}=0-3,8;{QWEN3}=4-7", run_dir=tmp_path)


def test_machine_groups():
    assert machine_groups([1.0, 1.0], 2) == [(0,), (1,)]
    assert machine_groups([1.0, 1.0, 1.0], 2) == [(0,), (0,), (1,)]
    assert machine_groups([1.0, 1.0], 4) == [(0, 1), (2, 3)]
    assert machine_groups([1.0, 3.0], 4) == [(0,), (1, 2, 3)]
    assert machine_groups([1.0], 2) == [(0, 1)]


def test_placement_on_machines_shares_each_machine_like_one():
    placed = plan_placement_nodes([("a", 1.0), ("b", 1.0), ("c", 2.0)], gpus=8, nodes=2, cpu_cores=16)
    assert [(p.machines, p.devices) for p in placed.policies] == [
        ((0,), (0, 1, 2, 3)), ((0,), (4, 5, 6, 7)), ((1,), tuple(range(8, 16)))]
    assert [p.cpu_threads for p in placed.policies] == [8, 8, 16]
    assert local_devices(placed.policies[2], 1, 8) == tuple(range(8))
    one = plan_placement_nodes([("a", 1.0), ("b", 1.0)], gpus=8, nodes=1)
    assert one.nodes == 1 and [p.machines for p in one.policies] == [(0,), (0,)]
    with pytest.raises(PlacementError, match="machine 0 of 2"):
        plan_placement_nodes([("a", 1.0), ("b", 1.0), ("c", 1.0)], gpus=1, nodes=2)


def test_cpu_policy_spanning_machines_runs_torchrun_nodes(tmp_path):
    plan = dry_run("tiny", ["launch.nodes=4", "launch.main_address=10.0.0.1"], gpus=0, run_dir=tmp_path)
    bpe, sp = plan.policies
    assert bpe.placement.machines == (0, 1) and bpe.placement.num_processes == 2
    assert bpe.grpo["per_device_train_batch_size"] == 16  # 32 completions per step over 2 ranks
    argv = bpe.commands[1].argv
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    assert [flag(argv, f) for f in ("--nnodes", "--node_rank", "--nproc_per_node", "--master_addr", "--master_port")] \
        == ["2", "1", "1", "10.0.0.1", "29500"]
    assert flag(sp.commands[0].argv, "--master_addr") == "<address of machine 2>"
    assert bpe.commands[1].env["ACCELERATE_USE_CPU"] == "true"


def test_machine_rank_must_be_a_machine_of_the_run(tmp_path):
    with pytest.raises(UsageError, match="--machine-rank 2 is not a machine of --nodes 2"):
        dry_run("tiny", ["launch.nodes=2", "launch.machine_rank=2"], gpus=0, run_dir=tmp_path)


def test_another_machines_files_do_not_make_a_new_run_folder_look_used(tmp_path):
    root = tmp_path / "run"
    with RunLock(root, machine_lock_name(1)).acquire("join"):
        join_path(root, 1).parent.mkdir(parents=True)
        join_path(root, 1).write_text("{}")
        check_run_dir(RunPaths(root), resume=False, overwrite=False)  # machine 0 may still create the run here
        RunLock(root).acquire("train into").release()  # machine 0's lock is another file
        with pytest.raises(UsageError, match="join as machine 1"):
            RunLock(root, machine_lock_name(1)).acquire("join as machine 1", wait_for_orphans_s=0)


def in_thread(target, *args):
    result: dict = {}

    def run():
        try:
            result["value"] = target(*args)
        except Exception as err:  # noqa: BLE001 - handed to the test
            result["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def test_machines_join_a_session_and_report(tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    stale = {"session": "old", "nodes": 2, "machines": {"1": {"token": "someone else"}}}
    session_path(root).parent.mkdir()
    session_path(root).write_text(json.dumps(stale))  # left by an earlier launch: never accepted
    joiner, joined = in_thread(join_session, root, 1, 2, "10.0.0.2", 30.0, lambda _: None)
    session = open_session(root, 2, "10.0.0.1", 7, 30.0, lambda _: None)
    joiner.join(30)
    assert "error" not in joined, joined.get("error")
    assert joined["value"]["session"] == session["session"] != "old"
    assert session["resume_step"] == 7 and session["machines"]["1"]["address"] == "10.0.0.2"
    policies = {"a": (0,), "b": (1,)}
    watch = RemoteWatch(root, root / "see", session, 0, policies, wait_for=[1], peer_timeout_s=300)
    elsewhere = RemoteWatch(root, root / "see", session, 1, policies, wait_for=[], peer_timeout_s=300)
    assert watch.failure() is None and not watch.finished()
    elsewhere.report(True, returncodes={"b": 0})
    assert read_done(root, 1, session)["ok"] and watch.finished()
    mark_policy_failed(root / "see", "a", "out of memory")
    assert elsewhere.failure() == ("a", "failed on machine 0: out of memory")


def test_a_second_launcher_for_the_same_machine_rank_is_refused(tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    first, _ = in_thread(join_session, root, 1, 2, "a", 30.0, lambda _: None)
    open_session(root, 2, "main", None, 30.0, lambda _: None)
    first.join(30)
    second, result = in_thread(join_session, root, 1, 2, "b", 5.0, lambda _: None)
    while json.loads(join_path(root, 1).read_text())["address"] != "b":  # it has seen the current session
        time.sleep(0.05)
    # machine 0 restarts (a resume) and accepts whichever joined last: not this one
    session = json.loads(session_path(root).read_text())
    session_path(root).write_text(json.dumps({**session, "session": "new"}))
    second.join(30)
    assert isinstance(result.get("error"), UsageError) and "two launchers claimed" in str(result["error"])


def test_machine_0_names_the_machines_that_never_joined(tmp_path):
    with pytest.raises(UsageError, match=r"machine\(s\) 1, 2 did not join"):
        open_session(tmp_path, 3, "main", None, 0.01, lambda _: None)


def test_a_filesystem_without_locks_warns_and_a_holder_elsewhere_counts_as_live(tmp_path, monkeypatch):
    import errno
    import fcntl

    from mutualrl.launch.rundir import lock as run_lock

    assert run_lock.holder_alive({"host": "another-machine", "pid": 999999999})
    assert not run_lock.holder_alive({"host": run_lock.socket.gethostname(), "pid": 999999999})

    def no_locks(fd, how):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    lock = RunLock(tmp_path).acquire("train into")
    assert "no file locks" in lock.warning and "-o flock" in lock.warning
    lock.release()

"""End to end: `mutualrl train` runs two policies with different tokenizers as two real processes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from e2e_helpers import TINY_REGIMES_2_STEPS, assert_ok, metric_lines, run_train, write_recipe
from mutualrl.run_folder import RunPaths, run_id
from mutualrl.see.exchange import ExperienceExchange

POLICIES = ("tiny-bpe", "tiny-sp")


@pytest.mark.slow
@pytest.mark.parametrize("tiny_regime_2_steps", ["xgrpo"], indirect=True)
def test_two_policies_exchange_records_every_step(tiny_regime_2_steps):
    """The shared 2-step xgrpo run of the tiny pool (two tokenizers, two processes): every step's records of both
    policies in the exchange, the same prompts, a train row per step, validation at the start and the end."""
    run_dir, done = tiny_regime_2_steps
    assert_ok(done)
    steps, rollouts = 2, 32  # the tiny pool: per_device_train_batch_size 32 rollouts per step
    exchange = ExperienceExchange(run_dir / "see", run_id=run_id(RunPaths(run_dir)), policy="tiny-bpe",
                                  policies=list(POLICIES), barrier_timeout_s=5, retention_steps=None)
    for step in range(steps):
        tables: dict[str, pa.Table] = exchange.gather(step, columns=["prompt_id", "sample_index", "reward"])
        assert set(tables) == set(POLICIES)
        ids = {name: sorted(zip(t.column("prompt_id").to_pylist(), t.column("sample_index").to_pylist()))
               for name, t in tables.items()}
        assert len(ids["tiny-bpe"]) == rollouts
        assert ids["tiny-bpe"] == ids["tiny-sp"], f"step {step}: policies saw different prompts"
    train = metric_lines(run_dir)
    for policy in POLICIES:
        rows = [line for line in train if line["policy"] == policy]
        assert [line["step"] for line in rows] == list(range(1, steps + 1))
        assert all("xgrpo/mean_abs_adv_change" in line for line in rows)
    evals = metric_lines(run_dir, "eval")
    assert {(e["policy"], e["step"]) for e in evals} == {(p, s) for p in POLICIES for s in (0, steps)}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["policies"]) == set(POLICIES) and summary["policies"]["tiny-sp"]["steps"] == steps
    for policy in POLICIES:
        assert (run_dir / "policies" / policy / "final" / "config.json").exists()


def _wait_for(predicate, timeout: float, what: str, proc=None) -> None:
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"train exited (rc={proc.returncode}) before {what}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _status(run_dir: Path, policy: str) -> dict:
    try:
        return json.loads((run_dir / "status" / f"{policy}.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.slow
@pytest.mark.user_start
def test_killed_peer_stops_the_pool_named_and_resume_finishes_with_the_same_steps(random_lm_pair, tmp_path):
    """see.on_peer_failure left at its default (stop): a peer killed after the first checkpoint fails the run,
    named, well inside the barrier timeout, with no damaged shard; --resume then trains every step once."""
    import os
    import signal
    import subprocess
    import time

    from e2e_helpers import child_env, train_command
    from mutualrl.ops.exchange_inspect import inspect_exchange

    steps = 6
    recipe = write_recipe(tmp_path / "r.yaml", random_lm_pair, regime="sgt", steps=steps,
                          extra={"grpo.save_strategy": "steps", "grpo.save_steps": 2, "see.barrier_timeout_s": 60,
                                 "validation.at_start": False})
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(train_command(recipe, run_dir), env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    ckpt = lambda p: (run_dir / "policies" / p / "checkpoint-2" / "trainer_state.json").exists()  # noqa: E731
    _wait_for(lambda: ckpt("bpe") and ckpt("sp") and _status(run_dir, "sp").get("step", 0) >= 3, 240,
              "checkpoint-2 of both policies", proc)
    os.kill(_status(run_dir, "sp")["pid"], signal.SIGKILL)
    killed_at = time.time()
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert time.time() - killed_at < 60  # well inside the 60 s barrier timeout
    # 'stop' is the default: the recipe leaves see.on_peer_failure unset
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["see"]["on_peer_failure"] == "stop"
    assert "policy sp failed" in out
    bpe_log = (run_dir / "logs" / "bpe.log").read_text()
    assert "policy 'sp'" in bpe_log and "failed" in bpe_log and "stops waiting for step" in bpe_log
    assert "killed by signal SIGKILL" in bpe_log
    report = inspect_exchange(run_dir / "see")
    corrupt = [c for row in report.cells.values() for c in row.values() if c.corrupt_ranks]
    assert not corrupt, "a reader must never see a partial or damaged shard"
    assert any(f["policy"] == "sp" for f in report.failures)

    done = run_train(recipe, run_dir, "--resume")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resuming every policy from checkpoint-" in done.stdout
    train = metric_lines(run_dir)
    for policy in ("bpe", "sp"):
        logged = [line["step"] for line in train if line["policy"] == policy]
        assert logged == list(range(1, steps + 1)), f"{policy}: {logged}"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert all(p["steps"] == steps for p in summary["policies"].values())
    for step in range(steps):
        assert {p.name for p in (run_dir / "see" / f"step-{step:06d}").iterdir()} == {"bpe", "sp"}


def _policy_steps(run_dir: Path, policy: str, kind: str = "train") -> list[int]:
    path = run_dir / "metrics" / f"{policy}.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return sorted(row["step"] for row in rows if row.get("kind") == kind)


def _folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _watch_phases(run_dir, phases: dict, proc) -> None:
    """Every status phase each policy writes while ``proc`` runs (a save of 4 s is seen many times over)."""
    import time

    while proc.poll() is None:
        for policy, seen in phases.items():
            try:
                seen.add(json.loads((run_dir / "status" / f"{policy}.json").read_text()).get("phase"))
            except (OSError, ValueError):
                pass
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.user_start
def test_sigterm_saves_every_policy_at_the_step_in_flight_and_resume_goes_on_from_it(hacpo_5_steps, tmp_path):
    """The tiny pool checkpoints every 100 steps: a SIGTERM at step 2 still saves every policy at the step in
    flight, within Slurm's 30 s KillWait, and --resume trains on from there; a --resume of the finished run then
    changes nothing in its folder. Each save takes 4 s (fault_injection.SAVE_DELAY_ENV), longer than the launcher's floor, made
    1 s for the test (fault_injection.STOP_GRACE_ENV, with a write rate of 0.004 GiB/s that makes the tiny pool's checkpoints
    take 10 s or more, as a 20 s floor against a 52 GiB one at 0.25 GiB/s): the plan's grace lets both finish.

    The regime is HACPO, whose running state (its capability window, Eq. 9) goes with each checkpoint: the stop's
    checkpoint holds the window of every step taken, and the resumed run ends with the weights of the same run not
    stopped, byte for byte (issue 77: two uninterrupted HACPO runs of one seed gave identical weights, a run stopped
    by SIGTERM and resumed gave others, its window restarted). The in-process round trip of every regime's state:
    tests/test_regime_state.py; every other regime ended and resumed: tests/test_resume_every_regime.py."""
    import re
    import signal
    import subprocess
    import sys
    import threading
    import time

    from e2e_helpers import TINY_HACPO_5_STEPS, child_env
    from mutualrl import fault_injection
    from mutualrl.ops.checkpoint_files import MANIFEST_NAME, checkpoint_problem
    from mutualrl.training.regime_state import REGIME_STATE_NAME

    steps, k = 5, 2  # TINY_HACPO_5_STEPS's length; the stop comes once a policy logged step k
    run_dir = tmp_path / "run"
    train = [sys.executable, "-m", "mutualrl", "train", "-o", str(run_dir)]
    proc = subprocess.Popen([*train, *TINY_HACPO_5_STEPS], stdout=subprocess.PIPE,
                            env={**child_env(), fault_injection.SAVE_DELAY_ENV: "tiny-bpe=4,tiny-sp=4",
                                 fault_injection.STOP_GRACE_ENV: "1,0.004"},
                            stderr=subprocess.STDOUT, text=True)
    _wait_for(lambda: any(max(_policy_steps(run_dir, p), default=0) >= k for p in POLICIES), 300,
              f"a policy to log step {k}", proc)
    phases: dict[str, set[str]] = {policy: set() for policy in POLICIES}
    watcher = threading.Thread(target=_watch_phases, args=(run_dir, phases, proc), daemon=True)
    watcher.start()
    proc.send_signal(signal.SIGTERM)
    signalled = time.time()
    out, _ = proc.communicate(timeout=120)
    assert 4 < time.time() - signalled < 30, out[-3000:]  # the saves, inside Slurm's default KillWait
    watcher.join()
    assert all("saving" in seen for seen in phases.values()), phases  # what the launcher's stop waits on
    assert proc.returncode == 130, out[-3000:]
    said = re.search(r"waiting up to (\d+) s: [^;]*, [0-9.]+ GiB of checkpoints at 0\.004 GiB/s \((\d+) s\), at "
                     r"least 1 s", " ".join(out.split()))
    assert said is not None and int(said.group(1)) >= int(said.group(2)) >= 10, out[-3000:]  # the plan's save, > 4 s
    saved = int(re.search(r"checkpoint-(\d+) of every policy", " ".join(out.split())).group(1))
    assert k <= saved < steps, out[-3000:]
    for policy in POLICIES:
        checkpoint = run_dir / "policies" / policy / f"checkpoint-{saved}"
        assert checkpoint_problem(checkpoint) is None
        assert not (run_dir / "policies" / policy / "final").exists()
        state = json.loads((checkpoint / REGIME_STATE_NAME).read_text())  # the window of every step taken
        assert state["regime"] == "hacpo" and len(state["state"]["capability_history"]) == saved, (policy, state)
        assert REGIME_STATE_NAME in json.loads((checkpoint / MANIFEST_NAME).read_text())["files"]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"

    done = subprocess.run([*train, "--resume"], env=child_env(), capture_output=True, text=True, timeout=600)
    assert_ok(done)
    assert f"resuming every policy from checkpoint-{saved}" in done.stdout
    for policy in POLICIES:
        assert _policy_steps(run_dir, policy) == list(range(1, steps + 1)), policy
        # the stop skipped the validation of the step it saved at; the resume did it (chaos lost those rows)
        assert _policy_steps(run_dir, policy, "eval") == list(range(1, steps + 1)), policy

    before = _folder_bytes(run_dir)
    again = subprocess.run([*train, "--resume"], env=child_env(), capture_output=True, text=True, timeout=300)
    assert_ok(again)
    assert "nothing to resume" in again.stdout
    after = _folder_bytes(run_dir)
    assert sorted(after) == sorted(before)
    assert [name for name in before if before[name] != after[name]] == []

    straight, done = hacpo_5_steps
    assert_ok(done)
    for policy in POLICIES:
        weights = [folder / "policies" / policy / "final" / "model.safetensors" for folder in (straight, run_dir)]
        assert weights[0].read_bytes() == weights[1].read_bytes(), f"{policy}: the resumed run's weights differ"


@pytest.mark.slow
def test_sgt_on_the_tiny_pool_rescues_and_compares_with_its_standalone_baseline(sgt_3_steps):
    """The embedded pool's blind spots make SGT fire from the first step; --baseline prints the comparison."""
    run_dir, done = sgt_3_steps
    assert_ok(done)
    train = metric_lines(run_dir)
    for policy in ("tiny-bpe", "tiny-sp"):
        rows = [line for line in train if line["policy"] == policy]
        assert [line["step"] for line in rows] == [1, 2, 3]
        assert rows[-1]["sgt/rescues_total"] > 0, f"{policy}: SGT never fired"
        assert any((line.get("sgt/nll_term") or 0) > 0 for line in rows)
        assert all(line["sgt/rescue_logp"] < 0 for line in rows if "sgt/rescue_logp" in line)
        assert any("sgt/rescue_logp" in line for line in rows)
        assert all(0 <= line["sgt/gate_rate"] <= 1 for line in rows)
    summary = json.loads((run_dir / "summary.json").read_text())
    for entry in summary["policies"].values():
        assert set(entry["groups_before"]) == set(entry["groups_after"]) == {"add", "sub"}
        assert entry["rescue_logp_first"] < 0
    evals = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all("eval/group/add/reward@1" in line for line in evals if line["kind"] == "eval")
    baseline = run_dir.with_name(f"{run_dir.name}-standalone")
    assert json.loads((baseline / "summary.json").read_text())["regime"] == "standalone"
    comparison = json.loads((run_dir / "comparison.json").read_text())
    assert {(r["policy"], r["group"]) for r in comparison["rows"]} == {
        (p, g) for p in ("tiny-bpe", "tiny-sp") for g in ("all", "add", "sub")}
    out = " ".join(done.stdout.split())
    assert "rescues" in out and "sgt vs standalone" in out and "mutualrl plot" in out  # console wraps paths
    versions = json.loads((run_dir / "run.json").read_text())["versions"]  # what the run ran with
    assert versions["trl"] == "1.16.0" and versions["tested_set"].startswith(("yes", "no: "))
    assert "earlier_versions" not in json.loads((run_dir / "run.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("tiny_regime_2_steps", list(TINY_REGIMES_2_STEPS), indirect=True)
def test_every_other_regime_trains_two_steps_on_the_tiny_pool(tiny_regime_2_steps, request):
    """One run per regime (PRP with each ratio denominator), shared with the tracker test."""
    run_dir, done = tiny_regime_2_steps
    name = request.node.callspec.params["tiny_regime_2_steps"]
    assert_ok(done)
    train = metric_lines(run_dir)
    assert sorted((line["policy"], line["step"]) for line in train) == [(p, s) for p in POLICIES for s in (1, 2)]
    regime = json.loads((run_dir / "summary.json").read_text())["regime"]
    assert regime == name.removesuffix("-peer").removesuffix("-learner")
    assert all(any(key.startswith(f"{regime}/") for key in line) for line in train)
    if regime == "prp":
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert config["regime"]["prp"]["denominator"] == name.split("-")[1]
        # peer rows joined the learner's batch: all of the one peer's rollouts of the step (K x its prompts)
        plan = json.loads((run_dir / "launch" / "plan.json").read_text())
        rollouts = {p["name"]: p["grpo"]["per_device_train_batch_size"] for p in plan["policies"]}
        peer_of = dict(zip(POLICIES, reversed(POLICIES)))
        assert all(line["prp/peer_rows"] == rollouts[peer_of[line["policy"]]] for line in train)
    if regime in ("opd-sgt", "byte-kd"):  # the rescue fired (each policy's blind spot) and its NLL entered the loss
        for policy in POLICIES:
            mine = [line for line in train if line["policy"] == policy]
            assert mine[-1][f"{regime}/rescues_total"] > 0 and any(f"{regime}/nll_term" in line for line in mine)


@pytest.mark.slow
def test_standalone_through_the_launcher_equals_vanilla_trl(tmp_path):
    """App. "Infrastructure fidelity": `mutualrl train --regime standalone` == vanilla GRPOTrainer."""
    import importlib.util

    from e2e_helpers import ROOT

    spec = importlib.util.spec_from_file_location("fidelity", ROOT / "benchmarks" / "fidelity.py")
    fidelity = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fidelity)
    result = fidelity.run(steps=3, model="builtin:tiny-bpe", workdir=tmp_path)
    assert result["max_frac_reward_zero_std"] == 0.0  # a signal in every group by construction, on any model
    assert result["params_moved"] > 1e-4
    assert result["max_abs_param_diff"] <= 1e-6


@pytest.mark.slow
def test_zero3_on_cpu_trains_the_tiny_pool(tmp_path):
    """DeepSpeed ZeRO-3 through the same launch path, one policy per process, on CPU. A one-policy ZeRO-2 run starts
    beside it on the same recipe port (the default's situation: the second run's worker died at its process group
    with EADDRINUSE, before each launcher claimed a block of free ports, launch/ports.py): both finish, on three
    distinct ports of the block, each its stage's engine."""
    import subprocess
    import sys
    import time

    from e2e_helpers import child_env, free_ports, train_command

    port = free_ports(4)
    run_dir, beside = tmp_path / "run", tmp_path / "run-zero2"
    zero2 = write_recipe(tmp_path / "zero2.yaml", {"bpe": "builtin:tiny-bpe"}, regime="standalone", steps=1,
                         extra={"launch.deepspeed": "zero2", "launch.main_process_port": port,
                                "validation.at_start": False})
    commands = [[sys.executable, "-m", "mutualrl", "train", "--pool", "tiny", "--max-steps", "2", "-o", str(run_dir),
                 "--set", "launch.deepspeed=zero3", "--set", "validation.limit=10",
                 "--set", f"launch.main_process_port={port}", "--set", "validation.every_steps=0"],
                train_command(zero2, beside)]
    procs = []
    for command in commands:
        procs.append(subprocess.Popen(command, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
        time.sleep(0.2)
    outputs = [proc.communicate(timeout=900)[0] for proc in procs]
    for proc, output in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, output[-3000:]
    for policy in ("tiny-bpe", "tiny-sp"):
        log = (run_dir / "logs" / f"{policy}.log").read_text()
        assert "DeepSpeed ZeRO-3 on cpu" in log
        assert (run_dir / "policies" / policy / "final").exists()
    assert sorted((line["policy"], line["step"]) for line in metric_lines(run_dir)) == [
        (p, s) for p in ("tiny-bpe", "tiny-sp") for s in (1, 2)]
    assert "DeepSpeed ZeRO-2 on cpu" in (beside / "logs" / "bpe.log").read_text()
    ports = [policy["main_process_port"] for folder in (run_dir, beside)
             for policy in json.loads((folder / "launch" / "plan.json").read_text())["policies"]]
    assert sorted(ports) == [port, port + 1, port + 2], ports

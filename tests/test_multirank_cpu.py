"""Several ranks per policy on CPU (launch.cpu_processes): the multi-rank path a GPU node runs, without GPUs.

A 2-policy SGT run with 2 ranks per policy must draw the same prompts per step, publish the
same number of SEE records (one shard per rank) and make the same gate decisions as the
1-rank run with the same seed. Sampled completions differ (each rank has its own RNG stream).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_helpers import TINY, assert_ok, child_env, free_ports, hold_tiny_sp
from mutualrl.run_folder import RunPaths, run_id
from mutualrl.see.exchange import ExperienceExchange
from mutualrl.ops.exchange_inspect import inspect_exchange

POLICIES = ("tiny-bpe", "tiny-sp")
STEPS = 3


def train(run_dir: Path, *extra: str, steps: int = STEPS, cwd: Path | None = None) -> None:
    """The 3-step SGT run of :data:`e2e_helpers.TINY_SGT_3_STEPS` (without its baseline), changed by ``extra``, started
    in ``cwd`` (where a module ``extra`` names lives)."""
    done = subprocess.run([sys.executable, "-m", "mutualrl", "train", *TINY, "--regime", "sgt", "--max-steps",
                           str(steps), "-o", str(run_dir), "--set", f"launch.main_process_port={free_ports(2)}", *extra],
                          cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=900)
    assert_ok(done)


def prompts(run_dir: Path, step: int, policy: str) -> list[tuple[str, int]]:
    exchange = ExperienceExchange(run_dir / "see", run_id=run_id(RunPaths(run_dir)), policy="reader",
                                  policies=list(POLICIES))
    table = exchange.read(step, policy, columns=["prompt_id", "sample_index"])
    return sorted(zip(table.column("prompt_id").to_pylist(), table.column("sample_index").to_pylist(), strict=True))


def train_rows(run_dir: Path) -> dict[tuple[str, int], dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {(r["policy"], r["step"]): r for r in rows if r["kind"] == "train"}


@pytest.mark.slow
def test_two_cpu_ranks_per_policy_match_one_rank(tmp_path, sgt_3_steps):
    one, done = sgt_3_steps  # the same run on 1 rank per policy
    assert_ok(done)
    two = tmp_path / "two"
    train(two, "--set", "launch.cpu_processes=2")
    report = inspect_exchange(two)
    assert report.ok, report.issues
    assert all(cell.ranks == [0, 1] and cell.world_size == 2 for row in report.cells.values() for cell in row.values())
    for step in range(STEPS):
        for policy in POLICIES:
            assert prompts(one, step, policy) == prompts(two, step, policy)
            assert report.cells[step][policy].records == inspect_exchange(one).cells[step][policy].records
    rows_one, rows_two = train_rows(one), train_rows(two)
    assert sorted(rows_one) == sorted(rows_two) == sorted((p, s) for p in POLICIES for s in range(1, STEPS + 1))
    # Gate decisions follow sampled rewards and each rank samples from its own RNG stream, so a group at a
    # threshold can go either way (with the 2-head tiny pool: 5 vs 6 rescues once); gating on half groups,
    # the multi-rank bug this guards against, changes far more.
    rescues_one = {k: r["sgt/rescues"] for k, r in rows_one.items()}
    rescues_two = {k: r["sgt/rescues"] for k, r in rows_two.items()}
    assert all(abs(rescues_one[k] - rescues_two[k]) <= 1 for k in rescues_one), (rescues_one, rescues_two)
    plan = json.loads((two / "launch" / "plan.json").read_text())
    assert [p["grpo"]["per_device_train_batch_size"] for p in plan["policies"]] == [16, 16]


@pytest.mark.slow
def test_zero3_and_bounded_staleness_with_two_cpu_ranks_per_policy(tmp_path):
    """One run carries two checks that do not interact (one launch fewer):

    - ZeRO-3 on 2 CPU ranks per policy: every round is published by both ranks, every step trains, each policy
      logs its ZeRO-3 engine and saves its final weights;
    - bounded staleness: rank 0 chooses the peer round and logs it; rank 1 reads that choice: both read the same
      stale round. tiny-sp is held at steps 0 and 1 until tiny-bpe has chosen its round of the next step (a reward
      function that waits, :func:`e2e_helpers.hold_tiny_sp`): tiny-bpe finds no round of tiny-sp at steps 0 and 1,
      then waits at step 2 for round 0, the oldest it may use, while round 1 cannot exist yet: it reads a round 2
      rounds old at step 2 by construction;
      a fixed sleep made that depend on the box's load (the fast policy had to finish 2 steps while the slow one
      slept: under load it once did not)."""
    from mutualrl.see.consumption_log import read_consumption

    run_dir = tmp_path / "zero3-stale"
    train(run_dir, "--set", "launch.cpu_processes=2", "--set", "launch.deepspeed=zero3",
          "--set", "see.max_staleness=2", *hold_tiny_sp(tmp_path, held_steps=2), cwd=tmp_path)
    report = inspect_exchange(run_dir)
    assert report.ok, report.issues
    assert all(cell.ranks == [0, 1] for row in report.cells.values() for cell in row.values())
    assert sorted(train_rows(run_dir)) == sorted((p, s) for p in POLICIES for s in range(1, STEPS + 1))
    for policy in POLICIES:
        assert "DeepSpeed ZeRO-3 on cpu:0 x2" in (run_dir / "logs" / f"{policy}.log").read_text()
        assert (run_dir / "policies" / policy / "final" / "config.json").exists()
    fast = read_consumption(run_dir / "see", "tiny-bpe")
    assert [r["step"] for r in fast] == list(range(STEPS)), "one line per step: rank 0 alone logs"
    assert any(r["age"] == 2 for r in fast), fast
    assert [r["age"] for r in fast] == [None, None, 2], fast  # the hold's order, exactly


@pytest.mark.slow
def test_catch_up_with_two_cpu_ranks_per_policy(tmp_path, monkeypatch):
    """Rank 0 of the slow policy decides which rounds to skip and logs it; rank 1 skips the same ones (a rank
    that trained a round the other skipped would hang in a collective): every round is published by both
    ranks or by neither."""
    from mutualrl.see.consumption_log import read_consumption

    # tiny-sp skips once its round time (the delay and its compute) is 1.5 times tiny-bpe's (compute alone): a 3 s
    # delay keeps that true while a loaded box's step takes up to 6 s, so 10 steps leave room for several skips
    # (it was 1.5 s and 16 steps).
    monkeypatch.setenv("MUTUALRL_DEBUG_STEP_DELAY", "tiny-sp=3.0")
    run_dir = tmp_path / "catch-up"
    steps = 10
    train(run_dir, "--set", "launch.cpu_processes=2", "--set", "see.max_staleness=1", "--set", "see.catch_up=true",
          "--set", "validation.at_start=false", steps=steps)
    spans = [(r["step"], r["until"]) for r in read_consumption(run_dir / "see", "tiny-sp", kind="skip")
             if r["until"] > r["step"]]
    assert spans, "tiny-sp never skipped a round"
    trained = {r["step"] for r in read_consumption(run_dir / "see", "tiny-sp")}
    skipped = {s for start, until in spans for s in range(start, until)}
    assert {0, 1} <= trained and not trained & skipped and len(trained) + len(skipped) == steps
    report = inspect_exchange(run_dir)
    assert report.ok, report.issues
    published = {step for step, row in report.cells.items() if "tiny-sp" in row}
    assert all(row["tiny-sp"].ranks == [0, 1] for row in report.cells.values() if "tiny-sp" in row)
    assert not published & skipped

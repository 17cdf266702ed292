"""SEE exchange: atomic publish, checksums, barrier semantics, failure markers, retention, real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
import xxhash

from mutualrl.errors import PeerError, UsageError
from mutualrl.see import (
    CorruptShardError,
    ExperienceExchange,
    InvalidRecordError,
    PeerFailedError,
    PeerTimeoutError,
    RolloutBatch,
    SchemaMismatchError,
    ShardMissingError,
    mark_policy_failed,
    read_failure,
)
from mutualrl.ops.exchange_inspect import inspect_exchange
from see_synthetic import RolloutRecord, batch_from_records, records_of, synthetic_batch

SRC = Path(__file__).resolve().parents[1] / "src"
TESTS = Path(__file__).resolve().parent


def exchange(root: Path, policy: str, **kw) -> ExperienceExchange:
    kw.setdefault("policies", ["a", "b"])
    kw.setdefault("barrier_timeout_s", 5.0)
    kw.setdefault("poll_interval_s", 0.01)
    return ExperienceExchange(root, "run-1", policy, **kw)


def records_with_nulls() -> RolloutBatch:
    return batch_from_records(
        [
            RolloutRecord("q0", 0, "2+2?", "4", [19, 2], [(0, 1), (-1, -1)], 1.0, 0.7, [-0.1, -0.01], True),
            RolloutRecord("q0", 1, "2+2?", "", [], [], 0.0, None, None, False),
            RolloutRecord("q1", 0, "héllo", "wörld", [7], [(0, 5)], 0.5, -0.3, [-2.5], False),
        ]
    )


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + str(TESTS)}  # see_synthetic
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


# --------------------------------------------------------------------------------------
# publish / read
# --------------------------------------------------------------------------------------


def test_publish_read_round_trip_with_manifest_and_provenance(tmp_path):
    a = exchange(tmp_path, "a", provenance={"model": "tiny-qwen", "tokenizer": "qwen2"})
    b = exchange(tmp_path, "b")
    batch = records_with_nulls()
    path = a.publish(3, batch)
    assert path == tmp_path / "step-000003" / "a" / "rank-0-of-1.arrow"

    manifest = json.loads(path.with_name("rank-0-of-1.manifest.json").read_text())
    assert manifest["rows"] == 3
    assert manifest["bytes"] == path.stat().st_size
    assert manifest["checksum"] == xxhash.xxh3_128(path.read_bytes()).hexdigest()
    assert manifest["schema_version"] == 4 and manifest["run_id"] == "run-1"
    assert (manifest["policy"], manifest["step"], manifest["rank"], manifest["world_size"]) == ("a", 3, 0, 1)
    assert manifest["provenance"]["model"] == "tiny-qwen"
    assert set(manifest["provenance"]["versions"]) == {"mutualrl", "trl", "transformers", "torch", "pyarrow"}
    assert manifest["provenance"]["pid"] == os.getpid()

    table = b.read(3, "a")
    assert table.schema.metadata == {b"schema_version": b"4"}  # who published it: the manifest's, once
    assert records_of(table) == records_of(batch)

    rewards = b.read(3, "a", columns=["reward", "prompt_id"])
    assert rewards.column_names == ["reward", "prompt_id"]
    assert rewards.column("reward").to_pylist() == [1.0, 0.0, 0.5]
    with pytest.raises(UsageError, match=r"unknown SEE column\(s\) \['rewards'\]"):
        b.read(3, "a", columns=["rewards"])


def test_publish_accepts_a_table_and_checks_it(tmp_path):
    a = exchange(tmp_path, "a")
    table = synthetic_batch(2, 2, seed=1).to_table()
    a.publish(0, table)
    assert a.read(0, "a").num_rows == 4
    with pytest.raises(InvalidRecordError, match=r"row 1 .*'reward': is inf"):  # a table from user code
        a.publish(1, table.set_column(table.column_names.index("reward"), "reward",
                                      pa.array([0.0, float("inf"), 0.0, 0.0], pa.float32())))
    with pytest.raises(UsageError, match="RolloutBatch or a pyarrow.Table"):
        a.publish(2, [1, 2, 3])  # type: ignore[arg-type]


def test_read_before_publish_names_missing_shards(tmp_path):
    a = exchange(tmp_path, "a")
    with pytest.raises(ShardMissingError, match=r"policy 'b' has not committed all shards of step 4"):
        a.read(4, "b")


def test_bad_names_and_settings_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="policy name '../x'"):
        ExperienceExchange(tmp_path, "r", "../x")
    with pytest.raises(UsageError, match=r"rank 2 is not in \[0, world_size=2\)"):
        ExperienceExchange(tmp_path, "r", "a", rank=2, world_size=2)
    with pytest.raises(UsageError, match="retention_steps must be >= 1"):
        ExperienceExchange(tmp_path, "r", "a", retention_steps=0)


# --------------------------------------------------------------------------------------
# atomicity: writers killed mid-way
# --------------------------------------------------------------------------------------

KILLED_WRITER = """
    import os, signal, sys
    from mutualrl import atomic_io
    from mutualrl.see import ExperienceExchange
    from see_synthetic import synthetic_batch

    root, mode = sys.argv[1], sys.argv[2]
    if mode == "mid-write":
        original_write = atomic_io.HashingSink.write
        def write(self, data):
            n = original_write(self, data)
            if self.nbytes > 2000:
                os.kill(os.getpid(), signal.SIGKILL)
            return n
        atomic_io.HashingSink.write = write
    else:  # "before-manifest": the data file is committed, the manifest never is
        original_commit = atomic_io.commit_rename
        def commit(tmp, final):
            if final.name.endswith(".manifest.json"):
                os.kill(os.getpid(), signal.SIGKILL)
            original_commit(tmp, final)
        atomic_io.commit_rename = commit
    ex = ExperienceExchange(root, "run-1", "b", policies=["a", "b"])
    ex.publish(0, synthetic_batch(8, 2, 16, 64, seed=3))
    print("not killed")
"""


@pytest.mark.parametrize(("mode", "issue_kind"), [("mid-write", "stray_temp"), ("before-manifest", "uncommitted_data")])
def test_killed_writer_is_never_seen_by_readers(tmp_path, mode, issue_kind):
    a = exchange(tmp_path, "a", barrier_timeout_s=0.3)
    a.publish(0, synthetic_batch(8, 2, 16, 64, seed=4))
    proc = run_python(KILLED_WRITER, str(tmp_path), mode)
    assert proc.returncode == -9, proc.stderr
    assert "not killed" not in proc.stdout
    leftovers = sorted(p.name for p in (tmp_path / "step-000000" / "b").iterdir())
    if mode == "mid-write":
        assert len(leftovers) == 1 and leftovers[0].startswith(".rank-0-of-1.arrow.tmp-")
    else:
        assert "rank-0-of-1.arrow" in leftovers and "rank-0-of-1.manifest.json" not in leftovers

    with pytest.raises(PeerTimeoutError) as info:
        a.wait_for(0)
    assert info.value.missing == {"b": None}
    with pytest.raises(ShardMissingError):
        a.read(0, "b")

    report = inspect_exchange(tmp_path)
    kinds = {i.kind for i in report.issues}
    assert issue_kind in kinds
    assert "missing_policy" in kinds  # b has files at step 0 but never committed
    assert not report.ok


# --------------------------------------------------------------------------------------
# corruption
# --------------------------------------------------------------------------------------


def _published(tmp_path: Path) -> tuple[ExperienceExchange, Path, Path]:
    a = exchange(tmp_path, "a")
    b = exchange(tmp_path, "b")
    data = b.publish(1, synthetic_batch(6, 2, 8, 48, seed=5))
    return a, data, data.with_name("rank-0-of-1.manifest.json")


def test_a_shard_is_checked_once_after_its_checksum(tmp_path, monkeypatch):
    from mutualrl.see import shards

    a, data, _ = _published(tmp_path)
    calls = []
    real = shards.validate_table
    monkeypatch.setattr(shards, "validate_table", lambda table: calls.append(table.num_rows) or real(table))
    a.read(1, "b")
    a.read(1, "b", columns=["reward"])  # the same file again: neither hashed nor checked
    assert calls == [12]
    exchange(tmp_path, "a").read(1, "b")  # another reader (its own cache) checks it once itself
    assert calls == [12, 12]


def test_flipped_byte_is_a_checksum_error_naming_the_file_even_for_one_column(tmp_path):
    a, data, _ = _published(tmp_path)
    assert a.read(1, "b", columns=["reward"]).num_rows == 12  # verified and cached
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    data.write_bytes(bytes(raw))
    with pytest.raises(CorruptShardError, match="xxh3_128 is") as info:
        a.read(1, "b", columns=["reward"])
    err = info.value
    assert err.problem == "checksum" and err.path == data and err.peer == "b" and err.step == 1
    assert str(data) in str(err)
    assert isinstance(err, PeerError)


def test_truncated_shard(tmp_path):
    a, data, _ = _published(tmp_path)
    raw = data.read_bytes()
    data.write_bytes(raw[: len(raw) // 3])
    with pytest.raises(CorruptShardError, match=rf"{data.name}.*bytes on disk, manifest says {len(raw)}") as info:
        a.gather(1, policies=["b"])
    assert info.value.problem == "truncated"


def test_unreadable_shard_with_matching_checksum(tmp_path):
    a, data, manifest_path = _published(tmp_path)
    garbage = os.urandom(data.stat().st_size)
    data.write_bytes(garbage)
    manifest = json.loads(manifest_path.read_text())
    manifest["checksum"] = xxhash.xxh3_128(garbage).hexdigest()
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(CorruptShardError, match="not a readable Arrow IPC file") as info:
        a.read(1, "b")
    assert info.value.problem == "unreadable"


@pytest.mark.parametrize(
    ("field", "value", "error", "problem"),
    [
        ("schema_version", 99, SchemaMismatchError, "schema_version"),
        ("rows", 13, CorruptShardError, "rows"),
        ("step", 2, CorruptShardError, "manifest_mismatch"),  # copied from another step: not trusted
        ("policy", "a", CorruptShardError, "manifest_mismatch"),
        ("world_size", 2, CorruptShardError, "manifest_mismatch"),
        ("rank", 0, None, None),  # unchanged: control
    ],
)
def test_manifest_disagreeing_with_file_or_path(tmp_path, field, value, error, problem):
    a, _, manifest_path = _published(tmp_path)
    manifest = json.loads(manifest_path.read_text())
    manifest[field] = value
    manifest_path.write_text(json.dumps(manifest))
    if error is None:
        assert a.read(1, "b").num_rows == 12
        return
    with pytest.raises(error) as info:
        a.read(1, "b")
    assert info.value.problem == problem
    assert str(tmp_path) in str(info.value) and "\n" not in str(info.value)


def test_a_shard_of_the_older_layout_is_refused_by_name(tmp_path):
    a, _, manifest_path = _published(tmp_path)
    manifest = json.loads(manifest_path.read_text())
    manifest["schema_version"] = 1
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(SchemaMismatchError, match=rf"^{tmp_path} was written by an older mutualrl \(SEE schema v1; "
                       r"this one reads v2, v3 and v4\): start a new run .*or resume this one with the mutualrl version "
                       r"that wrote it \(0\.3\.0 or earlier\)$"):
        a.read(1, "b")


def test_a_bad_peer_row_names_the_file_the_policy_the_row_and_the_column(tmp_path):
    a = exchange(tmp_path, "a")
    b = exchange(tmp_path, "b")
    table = synthetic_batch(3, 2, 1, 8, seed=1).to_table()
    index = table.column_names.index("reward")
    bad = table.set_column(index, table.schema.field(index),
                           pa.array([0.0, 0.0, 0.0, float("-inf"), 0.0, 0.0], pa.float32()))
    # what a buggy peer would write: publish() of a RolloutBatch writes it as built
    b.publish(1, RolloutBatch.from_table(table))
    data = tmp_path / "step-000001" / "b" / "rank-0-of-1.arrow"
    original = RolloutBatch.from_table(table)
    original._table = bad
    b.publish(2, original)
    assert a.read(1, "b").num_rows == 6
    with pytest.raises(CorruptShardError) as info:
        a.read(2, "b")
    message = str(info.value)
    assert info.value.problem == "invalid_record" and info.value.peer == "b"
    assert str(data).replace("000001", "000002") in message and "policy 'b'" in message
    assert "row 3 (prompt_id='p000001', sample_index=1): column 'reward': is -inf" in message


# --------------------------------------------------------------------------------------
# barrier
# --------------------------------------------------------------------------------------


def test_barrier_returns_at_once_when_peers_are_there(tmp_path):
    a = exchange(tmp_path, "a")
    b = exchange(tmp_path, "b")
    a.publish(0, synthetic_batch(2, 2, seed=1))
    b.publish(0, synthetic_batch(2, 2, seed=2))
    t0 = time.monotonic()
    shards = a.wait_for(0)
    assert time.monotonic() - t0 < 0.5
    assert [s.policy for s in shards["a"] + shards["b"]] == ["a", "b"]
    assert shards["b"][0].rows == 4


def test_barrier_timeout_names_peer_step_and_heartbeat(tmp_path):
    a = exchange(tmp_path, "a", barrier_timeout_s=0.4)
    b = exchange(tmp_path, "b")
    b.publish(2, synthetic_batch(2, 2, seed=2))
    a.publish(3, synthetic_batch(2, 2, seed=1))
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError) as info:
        a.wait_for(3)
    waited = time.monotonic() - t0
    assert 0.4 <= waited < 1.5
    err = info.value
    assert err.peer == "b" and err.step == 3 and err.missing == {"b": None}
    assert err.heartbeat_age_s["b"] is not None and 0 <= err.heartbeat_age_s["b"] < 60
    message = str(err)
    assert "step 3" in message and "policy 'b': no shard committed" in message
    assert "last published step 2" in message and "timed out after 0.4 s" in message


def test_barrier_ignores_shards_of_another_run(tmp_path):
    old = ExperienceExchange(tmp_path, "run-0", "b", policies=["a", "b"])
    old.publish(0, synthetic_batch(2, 2, seed=2))
    a = exchange(tmp_path, "a", barrier_timeout_s=0.2)
    a.publish(0, synthetic_batch(2, 2, seed=1))
    with pytest.raises(PeerTimeoutError, match=r"ignored shards of other run\(s\) \['run-0'\]"):
        a.wait_for(0)


def test_failure_marker_stops_the_barrier_at_once(tmp_path):
    a = exchange(tmp_path, "a", barrier_timeout_s=30)
    b = exchange(tmp_path, "b")
    marker = b.mark_policy_failed("CUDA out of memory in generate()", step=5)
    # The launcher's later, vaguer marker does not replace the first one.
    mark_policy_failed(tmp_path, "b", "process exited with code 1", run_id="run-1")
    assert read_failure(tmp_path, "b")["reason"] == "CUDA out of memory in generate()"
    t0 = time.monotonic()
    with pytest.raises(PeerFailedError) as info:
        a.wait_for(5)
    assert time.monotonic() - t0 < 1.0
    err = info.value
    assert err.peer == "b" and err.step == 5 and err.path == marker
    assert err.reason == "CUDA out of memory in generate()"
    assert "policy 'b' rank 0" in str(err) and "step 5" in str(err)


def test_failure_marker_of_another_run_is_ignored(tmp_path):
    mark_policy_failed(tmp_path, "b", "old crash", run_id="run-0")
    a = exchange(tmp_path, "a", barrier_timeout_s=0.2)
    with pytest.raises(PeerTimeoutError):
        a.wait_for(0)
    # A new run's marker replaces the stale one.
    mark_policy_failed(tmp_path, "b", "new crash", run_id="run-1")
    assert read_failure(tmp_path, "b")["reason"] == "new crash"
    with pytest.raises(PeerFailedError, match="new crash"):
        a.wait_for(0)


def test_multi_rank_barrier_waits_for_every_rank(tmp_path):
    a = exchange(tmp_path, "a", barrier_timeout_s=0.3)
    b0 = exchange(tmp_path, "b", rank=0, world_size=2)
    b1 = exchange(tmp_path, "b", rank=1, world_size=2)
    a.publish(0, synthetic_batch(4, 2, seed=1))
    b0.publish(0, synthetic_batch(2, 2, seed=2))
    with pytest.raises(PeerTimeoutError, match=r"policy 'b': ranks \[1\] of 2 not committed") as info:
        a.wait_for(0)
    assert info.value.missing == {"b": [1]}

    a.barrier_timeout_s = 10
    late = threading.Timer(0.3, lambda: b1.publish(0, synthetic_batch(2, 2, seed=3, prompt_offset=2)))
    late.start()
    try:
        t0 = time.monotonic()
        shards = a.wait_for(0)
        assert 0.2 < time.monotonic() - t0 < 5
    finally:
        late.join()
    assert [(s.rank, s.world_size) for s in shards["b"]] == [(0, 2), (1, 2)]
    table = a.read(0, "b")  # rank order: rank 0's 4 rows, then rank 1's
    assert table.num_rows == 8
    assert table.column("prompt_id").to_pylist()[:2] == ["p000000", "p000000"]
    assert table.column("prompt_id").to_pylist()[-1] == "p000003"
    # Own other rank: b0's barrier waits for b1 too (self is included by default).
    assert [s.rank for s in b0.wait_for(0)["b"]] == [0, 1]


# --------------------------------------------------------------------------------------
# retention
# --------------------------------------------------------------------------------------


def test_prune_keeps_last_n_steps_of_own_files_only(tmp_path):
    a = exchange(tmp_path, "a", retention_steps=2)
    b = exchange(tmp_path, "b", retention_steps=None)
    for step in range(6):
        a.publish(step, synthetic_batch(2, 2, seed=step))
        b.publish(step, synthetic_batch(2, 2, seed=100 + step))
        removed_a = a.prune(step)
        assert b.prune(step) == []
        if step == 5:
            assert {p.parent.parent.name for p in removed_a} == {"step-000002"}
    a_steps = sorted(p.parent.name for p in tmp_path.glob("step-*/a"))
    b_steps = sorted(p.parent.name for p in tmp_path.glob("step-*/b"))
    assert a_steps == ["step-000003", "step-000004", "step-000005"]
    assert b_steps == [f"step-{s:06d}" for s in range(6)]
    # The remaining shards still read and verify.
    assert b.read(4, "a").num_rows == 4
    with pytest.raises(ShardMissingError):
        b.read(2, "a")


def test_prune_removes_empty_step_folders(tmp_path):
    a = ExperienceExchange(tmp_path, "r", "a", retention_steps=1)
    for step in range(4):
        a.publish(step, synthetic_batch(1, 1, seed=step))
        a.prune(step)
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-000002", "step-000003"]


# --------------------------------------------------------------------------------------
# two real processes over several steps
# --------------------------------------------------------------------------------------

PEER_PROCESS = """
    import json, sys
    from mutualrl.see import ExperienceExchange
    from see_synthetic import synthetic_batch

    root, me, index, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    ex = ExperienceExchange(root, "run-2p", me, policies=["alpha", "beta"], barrier_timeout_s=60,
                            retention_steps=2, provenance={"model": me})
    log = []
    for step in range(4):
        batch = synthetic_batch(6, 3, 0, 40, seed=10 * index + step, prompt_offset=6 * step)
        ex.publish(step, batch)
        shards = ex.wait_for(step)  # who published each shard: its manifest
        tables = {p: ex.read_shards(found, ["prompt_id", "sample_index", "reward"]) for p, found in shards.items()}
        peer = [p for p in tables if p != me][0]
        own_ids = sorted(zip(tables[me]["prompt_id"].to_pylist(), tables[me]["sample_index"].to_pylist()))
        peer_ids = sorted(zip(tables[peer]["prompt_id"].to_pylist(), tables[peer]["sample_index"].to_pylist()))
        log.append({
            "step": step,
            "own_reward_sum": float(sum(batch.column("reward").to_pylist())),
            "peer": peer,
            "peer_reward_sum": float(sum(tables[peer]["reward"].to_pylist())),
            "peer_policy": sorted({info.policy for info in shards[peer]}),
            "peer_step": sorted({info.step for info in shards[peer]}),
            "same_prompts": own_ids == peer_ids,
            "rows": tables[peer].num_rows,
        })
        ex.prune(step)
    json.dump(log, open(out, "w"))
"""


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_two_processes_exchange_records_over_several_steps(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + str(TESTS)}  # see_synthetic
    root = tmp_path / "see"
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(PEER_PROCESS), str(root), name, str(i), str(tmp_path / f"{name}.json")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, name in enumerate(["alpha", "beta"])
    }
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{name}: {err}"
    logs = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in procs}
    for me, peer in (("alpha", "beta"), ("beta", "alpha")):
        assert [e["step"] for e in logs[me]] == [0, 1, 2, 3]
        for mine, theirs in zip(logs[me], logs[peer], strict=True):
            assert mine["same_prompts"] is True
            assert mine["rows"] == 18
            assert mine["peer_policy"] == [peer] and mine["peer_step"] == [mine["step"]]
            assert mine["peer_reward_sum"] == pytest.approx(theirs["own_reward_sum"])
    # retention_steps=2 at step 3 removed step 0 (steps < 1) of both policies; the rest is consistent.
    assert sorted(p.name for p in root.glob("step-*")) == ["step-000001", "step-000002", "step-000003"]
    report = inspect_exchange(root)
    assert report.ok, report.issues
    assert report.provenance["alpha"]["models"] == ["alpha"]



def test_from_recipe_settings(tmp_path):
    from mutualrl.config import SEESettings

    ex = ExperienceExchange.from_settings(
        SEESettings(barrier_timeout_s=12.0, retention_steps=3), tmp_path, run_id="r", policy="a", policies=["a", "b"]
    )
    assert ex.root == tmp_path / "see"
    assert (ex.barrier_timeout_s, ex.retention_steps, ex.peers) == (12.0, 3, ("b",))
    shared = ExperienceExchange.from_settings(
        SEESettings(dir=str(tmp_path / "nfs")), tmp_path, run_id="r", policy="a", rank=1, world_size=2
    )
    assert shared.root == tmp_path / "nfs" and (shared.rank, shared.world_size) == (1, 2)


def test_a_full_disk_mid_publish_names_the_file_and_leaves_earlier_steps_intact(tmp_path, monkeypatch):
    import errno

    from mutualrl import atomic_io

    writer, reader = exchange(tmp_path, "b"), exchange(tmp_path, "a")
    writer.publish(0, synthetic_batch(6, 2, 8, 48, seed=5))
    real_write, written = atomic_io.HashingSink.write, []

    def write_until_full(self, data):
        if written:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(len(data))
        return real_write(self, data)

    monkeypatch.setattr(atomic_io.HashingSink, "write", write_until_full)
    from mutualrl.errors import StorageError

    with pytest.raises(StorageError) as info:  # one line: the shard's path and the free space
        writer.publish(1, synthetic_batch(6, 2, 8, 48, seed=6))
    message = str(info.value)
    assert message.startswith("no space left on ") and "step-000001" in message and " free)" in message
    assert "\n" not in message
    monkeypatch.undo()
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and ".tmp" in p.name]  # no half-written file left
    assert reader.read(0, "b").num_rows == 12  # the last good step reads and verifies
    report = inspect_exchange(tmp_path)  # step 0 clean; step 1 only "not committed" (resume rolls it back)
    assert not report.cells[0]["b"].corrupt_ranks
    assert [(i.step, "stopped" in i.message) for i in report.issues] == [(1, True)]

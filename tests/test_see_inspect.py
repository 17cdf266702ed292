"""`mutualrl see inspect`: healthy and damaged exchanges, tables and JSON, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.see import ExperienceExchange
from see_synthetic import synthetic_batch

runner = CliRunner()


def build_run(run_dir: Path, steps: int = 3) -> dict[tuple[int, str], list[float]]:
    """A healthy two-policy run (policy b on two ranks); returns the rewards published per (step, policy)."""
    see = run_dir / "see"
    a = ExperienceExchange(see, "run-x", "a", policies=["a", "b"], provenance={"model": "tiny-a", "tokenizer": "tok-a"})
    b0 = ExperienceExchange(see, "run-x", "b", rank=0, world_size=2, policies=["a", "b"])
    b1 = ExperienceExchange(see, "run-x", "b", rank=1, world_size=2, policies=["a", "b"])
    rewards: dict[tuple[int, str], list[float]] = {}
    for step in range(steps):
        batch_a = synthetic_batch(4, 2, 0, 24, seed=step, prompt_offset=4 * step)
        batch_b0 = synthetic_batch(2, 2, 0, 24, seed=50 + step, prompt_offset=4 * step)
        batch_b1 = synthetic_batch(2, 2, 0, 24, seed=90 + step, prompt_offset=4 * step + 2)
        a.publish(step, batch_a)
        b0.publish(step, batch_b0)
        b1.publish(step, batch_b1)
        rewards[(step, "a")] = batch_a.column("reward").to_pylist()
        rewards[(step, "b")] = batch_b0.column("reward").to_pylist() + batch_b1.column("reward").to_pylist()
    return rewards


def inspect_json(path: Path) -> tuple[int, dict]:
    result = runner.invoke(app, ["see", "inspect", str(path), "--json"])
    return result.exit_code, json.loads(result.stdout)


def test_healthy_exchange_json(tmp_path):
    rewards = build_run(tmp_path)
    code, report = inspect_json(tmp_path)
    assert code == 0, report["issues"]
    assert report["ok"] is True and report["issues"] == []
    assert report["root"] == str(tmp_path / "see")
    assert report["steps"] == [0, 1, 2]
    assert report["policies"] == ["a", "b"]
    assert report["schema_versions"] == [4] and report["run_ids"] == ["run-x"]
    for step in range(3):
        cell_a = report["cells"][str(step)]["a"]
        cell_b = report["cells"][str(step)]["b"]
        assert cell_a["records"] == 8 and cell_b["records"] == 8
        assert cell_b["world_size"] == 2 and cell_b["ranks"] == [0, 1]
        assert cell_a["reward_mean"] == pytest.approx(np.mean(rewards[(step, "a")]))
        assert cell_b["reward_mean"] == pytest.approx(np.mean(rewards[(step, "b")]))
        both = rewards[(step, "a")] + rewards[(step, "b")]
        assert report["step_reward_mean"][str(step)] == pytest.approx(np.mean(both))
    all_rewards = [r for v in rewards.values() for r in v]
    assert report["overall_reward_mean"] == pytest.approx(np.mean(all_rewards))
    assert report["records"] == len(all_rewards)
    data_files = [f for f in report["files"] if f["kind"] == "data"]
    assert len(data_files) == 9 and all(f["bytes"] > 0 for f in data_files)
    assert report["total_bytes"] == sum(f["bytes"] for f in report["files"])
    assert report["provenance"]["a"]["models"] == ["tiny-a"]
    assert report["provenance"]["a"]["tokenizers"] == ["tok-a"]
    assert report["provenance"]["b"]["versions"][0]["pyarrow"]


def test_healthy_exchange_tables_on_the_see_folder_itself(tmp_path):
    build_run(tmp_path, steps=2)
    result = runner.invoke(app, ["see", "inspect", str(tmp_path / "see")])
    assert result.exit_code == 0
    assert "Records (reward mean) per policy and step" in result.stdout
    assert "step-000001/b/rank-1-of-2.arrow" in result.stdout
    assert "tiny-a" in result.stdout
    assert "consistent" in result.stdout


def test_damaged_exchange_reports_every_problem(tmp_path):
    build_run(tmp_path)
    see = tmp_path / "see"
    # checksum: flip a byte of a's step-0 shard
    shard = see / "step-000000" / "a" / "rank-0-of-1.arrow"
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 1
    shard.write_bytes(bytes(raw))
    # truncated: b rank 1 at step 1
    t = see / "step-000001" / "b" / "rank-1-of-2.arrow"
    t.write_bytes(t.read_bytes()[:100])
    # row count differing from the manifest: b rank 0 at step 2
    m = see / "step-000002" / "b" / "rank-0-of-2.manifest.json"
    manifest = json.loads(m.read_text())
    manifest["rows"] += 1
    m.write_text(json.dumps(manifest))
    # missing rank: remove b rank 1 at step 2
    (see / "step-000002" / "b" / "rank-1-of-2.manifest.json").unlink()
    # stray temp file and a failure marker
    (see / "step-000002" / "a" / ".rank-0-of-1.arrow.tmp-nodeA-4242-deadbeef").write_bytes(b"partial")
    ExperienceExchange(see, "run-x", "b", policies=["a", "b"]).mark_policy_failed("killed by OOM", step=2)
    # a step where policies saw different prompts
    a = ExperienceExchange(see, "run-x", "a", policies=["a", "b"])
    b = ExperienceExchange(see, "run-x", "b", policies=["a", "b"])
    a.publish(3, synthetic_batch(3, 2, seed=1, prompt_offset=0))
    b.publish(3, synthetic_batch(3, 2, seed=2, prompt_offset=1))
    # a step where b never committed
    a.publish(4, synthetic_batch(3, 2, seed=3))

    code, report = inspect_json(tmp_path)
    assert code == 1
    assert report["ok"] is False
    issues = {(i["kind"], i["step"], i["policy"]) for i in report["issues"]}
    assert ("checksum", 0, "a") in issues
    assert ("truncated", 1, "b") in issues
    assert ("rows", 2, "b") in issues
    assert ("missing_ranks", 2, "b") in issues
    assert ("failure_marker", 2, "b") in issues
    assert ("prompt_mismatch", 3, "a") in issues and ("prompt_mismatch", 3, "b") in issues
    assert ("missing_policy", 4, "b") in issues
    stray = [i for i in report["issues"] if i["kind"] == "stray_temp"]
    assert len(stray) == 1 and "pid 4242 on nodeA" in stray[0]["message"]
    assert report["cells"]["0"]["a"]["corrupt_ranks"] == [0]
    assert report["cells"]["0"]["a"]["records"] == 0
    assert report["failures"][0]["reason"] == "killed by OOM"
    # The checksum issue names the file.
    checksum = next(i for i in report["issues"] if i["kind"] == "checksum")
    assert checksum["path"] == "step-000000/a/rank-0-of-1.arrow"

    table = runner.invoke(app, ["see", "inspect", str(tmp_path), "--no-files"])
    assert table.exit_code == 1
    assert "inconsistencies" in table.stdout and "killed by OOM" in table.stdout


def test_no_checksum_mode_skips_hashing_but_checks_sizes(tmp_path):
    build_run(tmp_path, steps=1)
    shard = tmp_path / "see" / "step-000000" / "a" / "rank-0-of-1.arrow"
    raw = bytearray(shard.read_bytes())
    raw[-200] ^= 1  # inside the footer region: hashing catches it, the size check cannot
    shard.write_bytes(bytes(raw))
    assert runner.invoke(app, ["see", "inspect", str(tmp_path), "--json"]).exit_code == 1
    result = runner.invoke(app, ["see", "inspect", str(tmp_path), "--json", "--no-checksum"])
    report = json.loads(result.stdout)
    assert report["checksums_verified"] is False
    assert "checksum" not in {i["kind"] for i in report["issues"]}


def test_missing_folder_is_a_usage_error(tmp_path):
    result = runner.invoke(app, ["see", "inspect", str(tmp_path / "nope")])
    assert result.exit_code == 2
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["see", "inspect", str(tmp_path / "empty")])
    assert result.exit_code == 2


def test_rounds_a_policy_skipped_are_not_reported_missing(tmp_path):
    from mutualrl.see.consumption_log import append_row

    see = tmp_path / "see"
    a = ExperienceExchange(see, "run-x", "a", policies=["a", "b"])
    b = ExperienceExchange(see, "run-x", "b", policies=["a", "b"])
    for step in range(4):
        a.publish(step, synthetic_batch(3, 2, seed=step))
    for step in (0, 3):
        b.publish(step, synthetic_batch(3, 2, seed=step))
    append_row(see, "b", {"run_id": "run-x", "kind": "skip", "step": 1, "until": 3})  # see.catch_up
    code, report = inspect_json(tmp_path)
    assert code == 0 and report["ok"], report["issues"]
    append_row(see, "b", {"run_id": "run-x", "kind": "skip", "step": 1, "until": 2})
    (see / "_consumed" / "b.jsonl").write_text((see / "_consumed" / "b.jsonl").read_text().splitlines()[1] + "\n")
    code, report = inspect_json(tmp_path)
    assert ("missing_policy", 2, "b") in {(i["kind"], i["step"], i["policy"]) for i in report["issues"]}


def test_unscored_records_are_left_out_of_the_reward_means(tmp_path):
    """A reward of None is stored as NaN ("not scored"): the means are over the scored records only."""
    import pyarrow as pa

    from mutualrl.see.records import RolloutBatch

    see = tmp_path / "see"
    a = ExperienceExchange(see, "run-x", "a", policies=["a"])
    batch = synthetic_batch(2, 2, 0, 24, seed=3, prompt_offset=0)  # 4 records
    rewards = [1.0, float("nan"), 0.0, float("nan")]
    table = batch.to_table()
    index = table.schema.get_field_index("reward")
    field = table.schema.field(index)
    a.publish(0, RolloutBatch.from_table(table.set_column(index, field, pa.array(rewards, field.type))))
    code, report = inspect_json(tmp_path)
    assert code == 0, report["issues"]
    assert report["cells"]["0"]["a"]["records"] == 4
    assert report["cells"]["0"]["a"]["reward_mean"] == pytest.approx(0.5)
    assert report["step_reward_mean"]["0"] == pytest.approx(0.5)
    assert report["policy_reward_mean"]["a"] == pytest.approx(0.5)
    assert report["records"] == 4


def test_a_shard_of_the_older_layout_is_named_as_such(tmp_path):
    build_run(tmp_path, steps=1)
    manifest_path = tmp_path / "see" / "step-000000" / "a" / "rank-0-of-1.manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["schema_version"] = 1
    manifest_path.write_text(json.dumps(manifest))
    code, report = inspect_json(tmp_path)
    assert code == 1 and report["schema_versions"] == [1, 4]
    older = [i for i in report["issues"] if i["kind"] == "schema_version"]
    assert len(older) == 1 and "written by an older mutualrl (SEE schema v1" in older[0]["message"]
    assert "mixed_schema_versions" in {i["kind"] for i in report["issues"]}

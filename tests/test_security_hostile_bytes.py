"""Bytes an attacker wrote into an exchange, a checkpoint or a run folder are refused in one line naming the file,
never read out of bounds, never a traceback: an Arrow shard whose string offsets run past its data (its checksum
fixed in the manifest), a safetensors header whose length or nesting is absurd, JSON nested past the recursion
limit."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pyarrow as pa
import pytest
import xxhash

from mutualrl.see import CorruptShardError, ExperienceExchange
from see_synthetic import synthetic_batch


def published_shard(root: Path) -> tuple[ExperienceExchange, Path, Path]:
    reader = ExperienceExchange(root, "run-1", "a", policies=["a", "b"], barrier_timeout_s=5.0, poll_interval_s=0.01)
    writer = ExperienceExchange(root, "run-1", "b", policies=["a", "b"], barrier_timeout_s=5.0, poll_interval_s=0.01)
    data = writer.publish(1, synthetic_batch(6, 2, 8, 48, seed=5))
    return reader, data, data.with_name("rank-0-of-1.manifest.json")


def offsets_past_the_data(data: Path, column: str) -> bytes:
    """The shard's bytes with the last offset of string ``column`` pointing 1 GiB past its data buffer."""
    raw = bytearray(data.read_bytes())
    table = pa.ipc.open_file(pa.BufferReader(pa.py_buffer(bytes(raw)))).read_all()
    lengths = [len(text.encode()) for text in table.column(column).to_pylist()]
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    packed = struct.pack(f"<{len(offsets)}i", *offsets)
    at = raw.find(packed)
    assert at >= 0 and raw.find(packed, at + 1) < 0, "the column's offsets are in the file once"
    end = at + 4 * (len(offsets) - 1)
    raw[end:end + 4] = struct.pack("<i", 1 << 30)
    return bytes(raw)


def test_a_shard_whose_offsets_run_past_its_data_is_corrupt_not_read_out_of_bounds(tmp_path: Path) -> None:
    """Its checksum matches its manifest (whoever wrote it wrote both); the IPC reader alone accepts it and the
    first access of the column reads a gigabyte past the mapping (a segfault)."""
    reader, data, manifest_path = published_shard(tmp_path)
    hostile = offsets_past_the_data(data, "response_text")
    data.write_bytes(hostile)
    manifest = json.loads(manifest_path.read_text())
    manifest["checksum"] = xxhash.xxh3_128(hostile).hexdigest()
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(CorruptShardError) as info:
        reader.read(1, "b")
    assert info.value.problem == "unreadable" and str(data) in str(info.value) and "\n" not in str(info.value)


def test_a_manifest_nested_past_the_recursion_limit_is_a_corrupt_shard(tmp_path: Path) -> None:
    reader, _, manifest_path = published_shard(tmp_path)
    manifest_path.write_text("[" * 100_000)
    with pytest.raises(CorruptShardError, match="unreadable"):
        reader.read(1, "b")


@pytest.mark.parametrize("header", [
    struct.pack("<Q", 2**63) + b"{}",          # more than an index holds: OverflowError
    struct.pack("<Q", 2**40) + b"{}",          # a terabyte: MemoryError
    struct.pack("<Q", 100_000) + b"[" * 100_000,  # nested past the recursion limit
], ids=["length-2**63", "length-1TiB", "nested"])
def test_a_safetensors_header_of_absurd_length_or_nesting_is_one_line(tmp_path: Path, header: bytes) -> None:
    from mutualrl.ops.checkpoint_files import safetensors_problem

    path = tmp_path / "model.safetensors"
    path.write_bytes(header)
    problem = safetensors_problem(path)
    assert problem is not None and str(path) in problem and "\n" not in problem


def test_a_checkpoint_json_nested_past_the_recursion_limit_is_named(tmp_path: Path) -> None:
    from mutualrl.ops.checkpoint_files import MANIFEST_NAME, content_problem, manifest_problem, step_problem

    folder = tmp_path / "checkpoint-2"
    folder.mkdir()
    for name in ("trainer_state.json", MANIFEST_NAME):
        (folder / name).write_text("[" * 100_000)
    assert str(folder) in str(content_problem(folder)) and "recursion" in str(content_problem(folder))
    assert MANIFEST_NAME in str(manifest_problem(folder))
    assert "trainer_state.json" in str(step_problem(folder))


def test_a_run_folder_json_nested_past_the_recursion_limit_is_one_error_naming_it(tmp_path: Path) -> None:
    from mutualrl.errors import RunFolderError
    from mutualrl.run_folder import read_json, read_json_or

    path = tmp_path / "run.json"
    path.write_text("[" * 100_000)
    with pytest.raises(RunFolderError, match="run.json"):
        read_json(path)
    assert read_json_or(path, {"fallback": 1}) == {"fallback": 1}

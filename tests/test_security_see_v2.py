"""A peer's shard and manifest in the v2 layout (2026-11-26) are data from outside, checksum included (whoever
wrote the file wrote its manifest): each hostile value is one error naming the file, never a hang, a read past a
row, another shard's rows read as this one, or a wrong row matched to a learner's prompt."""

from __future__ import annotations

import json
import os
import struct
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from mutualrl.errors import PeerError
from mutualrl.regimes.core.peers import peer_groups
from mutualrl.see import CorruptShardError, ExperienceExchange, InvalidRecordError, SchemaMismatchError
from mutualrl.trust.arrow_ipc import UnsafeIpcFile, check_uncompressed
from mutualrl.see.records import RolloutBatch, validate_table
from see_synthetic import synthetic_batch


def exchanges(root: Path, world: int = 1) -> tuple[ExperienceExchange, list[ExperienceExchange]]:
    reader = ExperienceExchange(root, "run-1", "a", policies=["a", "b"], barrier_timeout_s=5.0, poll_interval_s=0.01)
    writers = [ExperienceExchange(root, "run-1", "b", rank=r, world_size=world, policies=["a", "b"],
                                  barrier_timeout_s=5.0, poll_interval_s=0.01) for r in range(world)]
    return reader, writers


def rewrite(manifest: Path, **fields) -> None:
    data = json.loads(manifest.read_text())
    data.update(fields)
    manifest.write_text(json.dumps(data))


def replace_data(data: Path, table: pa.Table, **write_options) -> None:
    """The shard's file replaced by ``table`` (v2 file metadata), its manifest's size, rows and checksum fixed."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(**write_options)
    with pa.ipc.new_file(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    raw = sink.getvalue().to_pybytes()
    data.write_bytes(raw)
    rewrite(data.with_name(data.name.replace(".arrow", ".manifest.json")), bytes=len(raw), rows=table.num_rows,
            checksum=xxhash.xxh3_128(raw).hexdigest())


def one_line_naming(err: BaseException, path: Path) -> bool:
    return str(path) in str(err) and "\n" not in str(err)


def test_a_span_past_the_text_in_the_last_row_with_spans_is_refused(tmp_path):
    """Rows without spans after it (empty or null) cut the last row's range short: its last span went unchecked."""
    reader, (writer,) = exchanges(tmp_path)
    batch = RolloutBatch(prompt_id=["p", "p"], sample_index=[0, 1], prompt_text=["q", "q"], response_text=["ab", ""],
                         response_token_ids=[[1, 2], []], response_token_spans=[[0, 1, 1, 99], []],
                         reward=[1.0, 0.0], finished=[True, True])  # built here: not checked
    data = writer.publish(1, batch)
    with pytest.raises(CorruptShardError, match=r"token 1 has span \(1, 99\) outside the response text of 2") as info:
        reader.read(1, "b")
    assert info.value.problem == "invalid_record" and one_line_naming(info.value, data)


def span_oracle(texts: list[str], spans: list[list[int] | None]) -> int | None:
    """The first row holding a span that is neither (-1, -1) nor inside its text, row by row."""
    for row, (text, flat) in enumerate(zip(texts, spans, strict=True)):
        for s, e in zip((flat or [])[0::2], (flat or [])[1::2], strict=True):
            if not ((s, e) == (-1, -1) or 0 <= s <= e <= len(text)):
                return row
    return None


def test_span_checks_agree_with_a_row_by_row_check_on_random_tables():
    rng = np.random.default_rng(3)
    refused = 0
    for _ in range(300):
        n = int(rng.integers(1, 6))
        texts = ["".join(rng.choice(list("ab é🦙"), size=int(rng.integers(0, 5)))) for _ in range(n)]
        tokens = [list(range(int(rng.integers(0, 4)))) for _ in range(n)]
        spans: list[list[int] | None] = []
        for text, ids in zip(texts, tokens, strict=True):
            flat = []
            for _ in ids:
                s = int(rng.integers(0, len(text) + 1))
                flat += [s, int(rng.integers(s, len(text) + 1))] if rng.random() < 0.8 else [-1, -1]
            spans.append(None if not ids and rng.random() < 0.5 else flat)
        if any(flat for flat in spans) and rng.random() < 0.7:  # one value moved out of range
            rows = [i for i, flat in enumerate(spans) if flat]
            # often the last end of the last row with spans: a reduction whose range rows after it cut short misses it
            row, at = (rows[-1], len(spans[rows[-1]]) - 1) if rng.random() < 0.5 else (int(rng.choice(rows)), None)
            at = int(rng.integers(0, len(spans[row]))) if at is None else at
            spans[row][at] = int(rng.choice([-2, -1, len(texts[row]) + 1, 1 << 30]))
        batch = RolloutBatch(prompt_id=["p"] * n, sample_index=list(range(n)), prompt_text=["q"] * n,
                             response_text=texts, response_token_ids=tokens, response_token_spans=spans,
                             reward=[0.0] * n, finished=[False] * n)
        want = span_oracle(texts, spans)
        try:
            validate_table(batch.to_table())
            got = None
        except InvalidRecordError as err:
            got = err.row
        assert got == want, (texts, spans)
        refused += want is not None
    assert 50 < refused < 250  # both verdicts were exercised


def test_a_data_file_that_is_a_fifo_is_corrupt_not_a_wait_forever(tmp_path):
    reader, (writer,) = exchanges(tmp_path)
    data = writer.publish(1, synthetic_batch(2, 2, seed=1))
    data.unlink()
    os.mkfifo(data)
    rewrite(data.with_name("rank-0-of-1.manifest.json"), bytes=0)
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            reader.read(1, "b")
            outcome.append(None)
        except BaseException as err:  # noqa: BLE001 - handed to the test thread
            outcome.append(err)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(10.0)
    if thread.is_alive():  # let the reader go: a writer opens the FIFO
        os.close(os.open(data, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5.0)
        pytest.fail("reading a FIFO named as a shard waited for a writer")
    assert isinstance(outcome[0], CorruptShardError) and one_line_naming(outcome[0], data)


def test_a_manifest_naming_another_ranks_data_file_is_corrupt(tmp_path):
    """Rank 1's manifest naming rank 0's file (size and checksum copied) would read rank 0's rows twice."""
    reader, writers = exchanges(tmp_path, world=2)
    first = writers[0].publish(1, synthetic_batch(2, 2, seed=1))
    writers[1].publish(1, synthetic_batch(2, 2, seed=2, prompt_offset=2))
    copied = json.loads(first.with_name("rank-0-of-2.manifest.json").read_text())
    manifest = first.with_name("rank-1-of-2.manifest.json")
    rewrite(manifest, data_file=first.name, bytes=copied["bytes"], checksum=copied["checksum"])
    with pytest.raises(CorruptShardError) as info:
        reader.read(1, "b")
    assert one_line_naming(info.value, manifest)


@pytest.mark.parametrize("name", ["../../step-000002/b/rank-0-of-1.arrow", "..", "/dev/zero"])
def test_a_manifest_naming_a_file_elsewhere_is_corrupt(tmp_path, name):
    reader, (writer,) = exchanges(tmp_path)
    data = writer.publish(1, synthetic_batch(2, 2, seed=1))
    writer.publish(2, synthetic_batch(2, 2, seed=1))
    manifest = data.with_name("rank-0-of-1.manifest.json")
    rewrite(manifest, data_file=name)
    with pytest.raises(CorruptShardError) as info:
        reader.read(1, "b")
    assert one_line_naming(info.value, manifest) or one_line_naming(info.value, data)


def test_a_manifest_of_the_older_layout_beside_the_others_is_refused_by_name(tmp_path):
    reader, writers = exchanges(tmp_path, world=2)
    for writer in writers:
        data = writer.publish(1, synthetic_batch(2, 2, seed=writer.rank))
    rewrite(data.with_name("rank-1-of-2.manifest.json"), schema_version=1)
    with pytest.raises(SchemaMismatchError, match=r"older mutualrl \(SEE schema v1") as info:
        reader.wait_for(1, ["b"])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_a_compressed_shard_is_refused_before_it_is_inflated(tmp_path, codec):
    """A few kB that inflate to 32 MB here (to gigabytes for an attacker): the publisher never compresses."""
    reader, (writer,) = exchanges(tmp_path)
    data = writer.publish(1, synthetic_batch(1, 1, 1, 1, seed=1))
    table = pa.ipc.open_file(data).read_all()
    texts = pa.chunked_array([pa.array(["a" * (32 << 20)], pa.string())])
    replace_data(data, table.set_column(3, table.schema.field(3), texts), compression=codec)
    assert data.stat().st_size < 1 << 20
    with pytest.raises(CorruptShardError, match=rf"record batch 0 is compressed \({codec}\); mutualrl writes "
                                                "uncompressed shards") as info:
        reader.read(1, "b")
    assert info.value.problem == "compressed" and one_line_naming(info.value, data)


def test_a_compressed_dictionary_batch_is_refused_before_it_is_inflated(tmp_path):
    """The SEE schema has no dictionary column, but the file reader reads the footer's dictionaries (inflating
    them) before the schema is compared: a peer's file with one is refused from its metadata all the same."""
    reader, (writer,) = exchanges(tmp_path)
    data = writer.publish(1, synthetic_batch(1, 1, 1, 1, seed=1))
    words = pa.array(["a" * (8 << 20)]).dictionary_encode()
    replace_data(data, pa.table({"word": words}), compression="zstd")
    with pytest.raises(CorruptShardError, match=r"dictionary batch 0 is compressed \(zstd\)") as info:
        reader.read(1, "b")
    assert info.value.problem == "compressed" and one_line_naming(info.value, data)


def test_a_compressed_batch_of_the_older_metadata_version_is_refused(tmp_path):
    """Metadata V4 may declare compression in the message's custom metadata (Arrow 0.17's form), which pyarrow
    still honours: no compression in the batch header, and the body inflated all the same."""
    reader, (writer,) = exchanges(tmp_path)
    data = writer.publish(1, synthetic_batch(1, 1, 1, 1, seed=1))
    table = pa.ipc.open_file(data).read_all()
    table = table.set_column(3, table.schema.field(3), pa.chunked_array([pa.array(["a" * (32 << 20)], pa.string())]))
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd", metadata_version=pa.ipc.MetadataVersion.V4)
    with pa.ipc.new_file(sink, table.schema, options=options) as ipc:
        ipc.write_batch(table.combine_chunks().to_batches()[0],
                        custom_metadata={"ARROW:experimental_compression": "zstd"})
    replace_bytes(data, sink.getvalue().to_pybytes())
    with pytest.raises(CorruptShardError, match="metadata version V4; mutualrl writes V5") as info:
        reader.read(1, "b")
    assert one_line_naming(info.value, data)


def replace_bytes(data: Path, raw: bytes) -> None:
    """The shard's file replaced by ``raw``, its manifest's size and checksum fixed (rows kept)."""
    data.write_bytes(raw)
    rewrite(data.with_name(data.name.replace(".arrow", ".manifest.json")), bytes=len(raw),
            checksum=xxhash.xxh3_128(raw).hexdigest())


def batch_block(raw: bytes) -> tuple[int, bytes]:
    """Where the footer holds the one record batch's Block (offset, metadata length, body length) and its bytes."""
    messages = pa.ipc.MessageReader.open_stream(pa.BufferReader(raw[8:]))
    schema_size = len(messages.read_next_message().serialize())
    batch = messages.read_next_message()
    body = batch.body.size
    block = struct.pack("<qi4xq", 8 + schema_size, len(batch.serialize()) - body, body)
    assert raw.count(block) == 1
    return raw.index(block), block


@pytest.mark.parametrize("damage", ["cut", "footer length", "root offset", "block past the end",
                                    "header past the block", "body past the end"])
def test_a_shard_with_a_broken_footer_or_block_is_one_line_corrupt(tmp_path, damage):
    reader, (writer,) = exchanges(tmp_path)
    data = writer.publish(1, synthetic_batch(2, 2, 1, 8, seed=1))
    raw = bytearray(data.read_bytes())
    footer_length = struct.unpack_from("<i", raw, len(raw) - 10)[0]
    at, block = batch_block(bytes(raw))
    offset, metadata_length, body = struct.unpack("<qi4xq", block)
    if damage == "cut":
        raw = raw[:-20]
    elif damage == "footer length":
        struct.pack_into("<i", raw, len(raw) - 10, len(raw))
    elif damage == "root offset":
        struct.pack_into("<I", raw, len(raw) - 10 - footer_length, 1 << 31)
    elif damage == "block past the end":
        struct.pack_into("<q", raw, at, len(raw) - 16)
    elif damage == "header past the block":
        struct.pack_into("<i", raw, offset + 4, metadata_length)
    else:
        struct.pack_into("<q", raw, at + 16, len(raw))
    with pytest.raises(UnsafeIpcFile):  # the metadata check's own refusal, not only pyarrow's after it
        check_uncompressed(pa.py_buffer(bytes(raw)))
    replace_bytes(data, bytes(raw))
    with pytest.raises(CorruptShardError) as info:
        reader.read(1, "b")
    assert info.value.problem == "unreadable" and one_line_naming(info.value, data)


def test_random_damage_to_the_metadata_is_refused_or_passed_never_another_error(tmp_path):
    """Bytes of the footer and the batch header overwritten at random: the check says UnsafeIpcFile or lets it
    through to pyarrow (whose own checks follow), never an exception of another kind or a read out of bounds."""
    _, (writer,) = exchanges(tmp_path)
    raw = writer.publish(1, synthetic_batch(2, 2, 1, 8, seed=1)).read_bytes()
    footer_length = struct.unpack_from("<i", raw, len(raw) - 10)[0]
    _, block = batch_block(raw)
    offset, metadata_length, _ = struct.unpack("<qi4xq", block)
    places = [*range(offset, offset + metadata_length), *range(len(raw) - 10 - footer_length, len(raw))]
    rng = np.random.default_rng(11)
    outcomes = set()
    for _ in range(2000):
        damaged = bytearray(raw)
        for place in rng.choice(places, size=int(rng.integers(1, 4))):
            damaged[place] = int(rng.integers(0, 256))
        try:
            check_uncompressed(pa.py_buffer(bytes(damaged)))
            outcomes.add("passed")
        except UnsafeIpcFile as err:
            outcomes.add(err.problem)
    assert outcomes >= {"passed", "unreadable"}


def test_an_honest_shard_passes_the_check_and_reads(tmp_path):
    reader, (writer,) = exchanges(tmp_path)
    data = writer.publish(1, synthetic_batch(3, 2, 0, 8, seed=1))
    check_uncompressed(pa.memory_map(str(data)).read_buffer())
    assert reader.read(1, "b").num_rows == 6


def dict_oracle(table: pa.Table, prompt_ids: list[str], k: int) -> list[list[int]] | None:
    """The rows as peer_groups found them before 2026-11-26 (a dict per prompt, the later row of a duplicate)."""
    index: dict[str, dict[int, int]] = {}
    for row, (pid, s) in enumerate(zip(table["prompt_id"].to_pylist(), table["sample_index"].to_pylist(),
                                       strict=True)):
        index.setdefault(pid, {})[s] = row
    try:
        return [[index[pid][i] for i in range(k)] for pid in prompt_ids]
    except KeyError:
        return None


def test_peer_rows_match_the_dict_lookup_for_chunked_shuffled_and_duplicated_rows():
    rng = np.random.default_rng(5)
    for _ in range(100):
        k, p = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        pids = [f"p{i}" for i in range(p + 1)]  # one prompt the learner does not hold
        rows = [(pid, s) for pid in pids for s in range(k + int(rng.integers(0, 2)))]  # sometimes a sample past K
        rows += [rows[int(i)] for i in rng.integers(0, len(rows), size=int(rng.integers(0, 3)))]  # duplicates
        if rng.random() < 0.2:
            rows.pop(int(rng.integers(0, len(rows))))  # a gap
        order = rng.permutation(len(rows))
        chunks = np.array_split(order, int(rng.integers(1, 4)))  # ranks' shards, concatenated
        table = pa.concat_tables([pa.table({"prompt_id": pa.array([rows[i][0] for i in c], pa.string()),
                                            "sample_index": pa.array([rows[i][1] for i in c], pa.int32())})
                                  for c in chunks])
        wanted = [pids[int(i)] for i in rng.integers(0, p, size=p)]  # repeats allowed
        want = dict_oracle(table, wanted, k)
        if want is None:
            with pytest.raises(PeerError):
                peer_groups(table, wanted, k, "b", 1)
        else:
            assert peer_groups(table, wanted, k, "b", 1).tolist() == want


@pytest.mark.parametrize("hostile", ["fifo heartbeat", "deep heartbeat", "deep failure marker"])
def test_a_peers_hostile_heartbeat_or_failure_marker_ends_the_barrier_in_one_line(tmp_path, hostile):
    """A FIFO as a heartbeat blocked the barrier's look at it forever (its timeout never came); JSON nested past
    the recursion limit was a RecursionError traceback."""
    reader = ExperienceExchange(tmp_path, "run-1", "a", policies=["a", "b"], barrier_timeout_s=0.3,
                                poll_interval_s=0.01)
    path = tmp_path / ("_failed/b.json" if "marker" in hostile else "_heartbeat/b.rank-0.json")
    if hostile.startswith("fifo"):
        os.mkfifo(path)
    else:
        path.write_text("[" * 100_000)
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            reader.wait_for(1, ["b"])
        except BaseException as err:  # noqa: BLE001 - handed to the test thread
            outcome.append(err)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    thread.join(10.0)
    if thread.is_alive():
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5.0)
        pytest.fail("the barrier waited on a FIFO")
    from mutualrl.see import PeerFailedError, PeerTimeoutError

    assert isinstance(outcome[0], PeerFailedError if "marker" in hostile else PeerTimeoutError), outcome
    assert "\n" not in str(outcome[0]).strip()

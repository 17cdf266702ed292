"""The one atomic writer: whole files only, no temporaries left behind, the umask decides the mode."""

from __future__ import annotations

import json
import os

import pytest

from mutualrl.atomic_io import write_json_atomic, write_text_atomic


def test_writes_replace_the_file_and_create_its_folder(tmp_path):
    path = tmp_path / "a" / "b.txt"
    assert write_text_atomic(path, "old") == path
    write_text_atomic(path, "new é")
    assert path.read_text(encoding="utf-8") == "new é"
    assert os.listdir(path.parent) == ["b.txt"]


def test_json_defaults_and_overrides(tmp_path):
    path = write_json_atomic(tmp_path / "x.json", {"p": tmp_path, "s": "é"})
    assert path.read_text() == json.dumps({"p": str(tmp_path), "s": "é"}, indent=1)
    write_json_atomic(path, {"s": "é"}, ensure_ascii=False, indent=2)
    assert path.read_text(encoding="utf-8") == '{\n  "s": "é"\n}'


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = write_text_atomic(tmp_path / "x.json", "old")
    with pytest.raises(TypeError):
        write_json_atomic(path, {"x": object()}, default=None)
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(path, "\udc80")  # a lone surrogate cannot be encoded: fails mid-write
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["x.json"]


def test_the_mode_follows_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "x", "x")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_every_file_goes_through_one_writer_with_temporary_names_inspect_knows(tmp_path, monkeypatch):
    from mutualrl import atomic_io
    from mutualrl.see import ExperienceExchange
    from see_synthetic import synthetic_batch

    seen = []
    real = atomic_io.commit_rename
    monkeypatch.setattr(atomic_io, "commit_rename", lambda tmp, final: seen.append((tmp, final)) or real(tmp, final))
    write_json_atomic(tmp_path / "status.json", {"a": 1})
    ExperienceExchange(tmp_path / "see", "run", "a").publish(0, synthetic_batch(2, 2, seed=1))
    assert {final.name for _, final in seen} >= {"status.json", "rank-0-of-1.arrow", "rank-0-of-1.manifest.json"}
    for tmp, final in seen:  # hidden, beside the final file, naming it, this host's pid: see inspect and prune read it
        match = atomic_io.TEMP_RE.match(tmp.name)
        assert tmp.parent == final.parent and match["final"] == final.name and int(match["pid"]) == os.getpid()


def test_a_hashed_write_returns_the_digest_of_the_bytes_on_disk(tmp_path):
    import xxhash

    from mutualrl.atomic_io import write_atomic

    sink = write_atomic(tmp_path / "x.bin", lambda s: (s.write(b"abc"), s.write(memoryview(b"def"))), hashed=True)
    assert (sink.nbytes, sink.hexdigest()) == (6, xxhash.xxh3_128(b"abcdef").hexdigest())
    assert write_atomic(tmp_path / "y.bin", lambda s: s.write(b"abc")).hexdigest() is None


@pytest.mark.parametrize("name", ["r" * 240 + ".json", "é" * 120 + ".json"])
def test_a_name_near_the_file_name_limit_is_written_on_a_long_host_name(tmp_path, monkeypatch, name):
    """The temporary name adds host, pid and token (about 90 bytes): cut to fit, it still names the writer."""
    import socket

    from mutualrl.atomic_io import TEMP_RE, temp_path

    monkeypatch.setattr(socket, "gethostname", lambda: "h" * 64)
    assert len(temp_path(tmp_path / name).name.encode()) <= 255
    assert TEMP_RE.match(temp_path(tmp_path / name).name).group("host") == "h" * 64
    write_text_atomic(tmp_path / name, "x")
    assert os.listdir(tmp_path) == [name]

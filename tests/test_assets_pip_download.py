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

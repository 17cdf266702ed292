"""A GPU box's torch (the recorded release in its CUDA build) leaves the tiny models uncompared, and doctor says why
without advising a set-up that cannot change it."""

from __future__ import annotations

from mutualrl import doctor
from mutualrl.pools import tiny_digests


def test_a_cuda_build_of_the_recorded_torch_is_said_as_such(monkeypatch):
    record = tiny_digests.read_record()
    held = record["built_with"]["torch"]  # 2.13.0+cpu
    here = {**tiny_digests.build_context(), "torch": held.split("+")[0] + "+cu128"}
    monkeypatch.setattr(tiny_digests, "build_context", lambda: here)
    assert tiny_digests.another_torch_build(record)
    found = doctor.check_tiny_digests()
    assert found.status == "warn" and "unchecked" in found.info.values(), found
    assert "nothing to install" in found.fix and "./setup.sh" not in found.fix


def test_another_torch_release_is_not_another_build(monkeypatch):
    here = {**tiny_digests.build_context(), "torch": "2.12.0+cpu"}
    monkeypatch.setattr(tiny_digests, "build_context", lambda: here)
    assert not tiny_digests.another_torch_build()
    assert "./setup.sh installs the versions" in doctor.check_tiny_digests().fix

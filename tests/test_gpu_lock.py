"""The GPU lock (requirements-gpu.txt) against what pip read when it resolved it (requirements-gpu.json): every line
agrees with every pin of the set's own distributions, vLLM's and torch's among them, read from that record, not
written here. The real resolution against the registry is tests/test_gpu_lock_resolution.py (its own tier)."""

from __future__ import annotations

import json
import re

import pytest

from gpu_lock_module import ROOT, load_gpu_lock
from mutualrl.host.cuda_driver import cuda_major_needed, minimum_driver

gpu_lock = load_gpu_lock()
RECORD = json.loads((ROOT / "requirements-gpu.json").read_text())
LOCK = gpu_lock.read_pins(ROOT / "requirements-gpu.txt")
PACKAGES = RECORD["packages"]


def exact_pins(requirer: str) -> list[tuple[str, str]]:
    """(name, version) of each ``==`` requirement of ``requirer`` that applies on the target, from the record."""
    extras = gpu_lock.requested_extras(RECORD["requested"], PACKAGES).get(requirer, set())
    found = []
    for text in PACKAGES[requirer]["requires_dist"]:
        need = gpu_lock.parse(text)
        pinned = [spec.version for spec in need.specifier if spec.operator == "=="]
        if pinned and gpu_lock.applies(text, extras):
            found.append((gpu_lock.canonicalize_name(need.name), pinned[0]))
    return found


def test_the_lock_is_the_set_pip_resolved():
    assert LOCK == {name: dist["version"] for name, dist in PACKAGES.items()}
    assert {"torch", "vllm", "trl", "transformers", "deepspeed"} <= set(LOCK)


def test_the_lock_was_resolved_for_the_project_as_pyproject_has_it_now():
    """A dependency or extra added to pyproject.toml since the lock was made fails here, in the fast tier: regenerate
    it (python .ci/gpu_lock.py write)."""
    assert RECORD["requested"] == gpu_lock.requested(), "pyproject.toml changed: .venv/bin/python .ci/gpu_lock.py write"


def test_no_line_of_the_lock_conflicts_with_a_requirement_of_the_set_or_of_the_project():
    assert gpu_lock.conflicts(LOCK, PACKAGES, RECORD["requested"]) == []


@pytest.mark.parametrize("requirer", ["vllm", "torch"])
def test_a_lock_line_off_a_pin_of_vllm_or_torch_is_a_conflict_naming_it(requirer):
    pins = exact_pins(requirer)
    assert pins, f"{requirer}'s record pins nothing exactly: the check below would check nothing"
    for name, version in pins:
        moved = {**LOCK, name: f"{version}.post999"}
        said = [why for pinned, why in gpu_lock.conflicts(moved, PACKAGES, RECORD["requested"]) if pinned == name]
        assert any(f"{requirer} {PACKAGES[requirer]['version']} requires" in why for why in said), (name, said)


def test_the_cpu_locks_lines_the_gpu_set_leaves_conflict_there_and_only_those():
    """What requirements-gpu.json says was set aside (today vLLM's and tilelang's apache-tvm-ffi pin) is a conflict
    if put back, and every other line the two locks share has one version."""
    cpu = gpu_lock.read_pins(ROOT / "requirements-tested.txt")
    shared = {name for name in cpu if name in LOCK}
    differ = {name for name in shared if cpu[name] != LOCK[name]}
    assert differ == set(RECORD["set_aside_from_cpu_lock"])
    for name in differ:
        put_back = gpu_lock.conflicts({**LOCK, name: cpu[name]}, PACKAGES, RECORD["requested"])
        assert any(pinned == name for pinned, _ in put_back), name


def test_every_file_is_a_wheel_for_the_target_or_a_source_the_registry_has_no_wheel_of():
    tags = set(RECORD["target"]["platforms"]) | {"any"}
    for name, dist in PACKAGES.items():
        if dist["file"].endswith(".whl"):
            platform = dist["file"].removesuffix(".whl").split("-")[-1]
            assert set(platform.split(".")) & tags, (name, dist["file"])
        else:
            assert dist["file"].endswith((".tar.gz", ".zip")), (name, dist["file"])


def test_no_index_is_named_in_the_lock_or_its_record():
    for path in ("requirements-gpu.txt", "requirements-gpu.json"):
        assert not re.search(r"://|files\.pythonhosted|pypi\.org", (ROOT / path).read_text()), path


def test_the_driver_the_readme_and_the_lock_name_is_the_one_the_sets_builds_need():
    needs = {cuda_major_needed(PACKAGES[name]["version"], PACKAGES[name]["requires_dist"])
             for name in ("torch", "vllm")}
    assert len(needs) == 1 and RECORD["cuda_major"] in needs
    driver = minimum_driver(RECORD["cuda_major"])
    assert driver == RECORD["minimum_driver"]
    notes = (ROOT / "README.md").read_text().split("## GPU notes", 1)[1].split("\n## ", 1)[0]
    assert f"R{driver}" in notes and f"CUDA {RECORD['cuda_major']}" in notes
    assert f"R{driver} or newer" in (ROOT / "requirements-gpu.txt").read_text()


def test_an_environment_with_a_cuda_torch_is_compared_with_the_gpu_set(monkeypatch):
    from mutualrl import versions
    from mutualrl.host import cuda_driver

    torch = PACKAGES["torch"]
    for build, lock in (((torch["version"], torch["requires_dist"]), versions.GPU_LOCK_NAME),
                        (("2.13.0+cu126", []), versions.GPU_LOCK_NAME), (("2.13.0+cpu", []), versions.LOCK_NAME),
                        (None, versions.LOCK_NAME)):
        monkeypatch.setattr(cuda_driver, "installed_build",
                            lambda name, build=build: build if name == "torch" else None)
        assert versions.lock_name() == lock, build
        assert versions.lock_path() == ROOT / lock
    assert versions.read_lock() == versions.parse_lock((ROOT / versions.LOCK_NAME).read_text())

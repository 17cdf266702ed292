"""What a run needs at run time that an install does not check: the run folder's filesystem and mount options the
SEE barrier depends on (doctor and the plan name them), and a C compiler where TRL's Triton kernels build their
launcher (CUDA faked: this machine has none)."""

from __future__ import annotations

import os
import shutil

import pytest

from mutualrl import doctor
from mutualrl.config.loader import load_run_config
from mutualrl.launch.plan.launch_plan import make_launch_plan
from mutualrl.ops import mounts


def mountinfo(table: str, point: str, fstype: str, source: str, options: str) -> str:
    """The mount ``table`` with one more mount at ``point`` (spaces escaped as mountinfo writes them)."""
    line = f"999 1 0:99 / {point.replace(' ', chr(92) + '040')} rw,relatime shared:9 - {fstype} {source} {options}"
    return table + line + "\n"


@pytest.fixture
def shared_mount(tmp_path, monkeypatch):
    """``shared_mount(options)``: ``tmp_path/shared folder`` is an NFS mount with these options."""
    folder = tmp_path / "shared folder"
    folder.mkdir()
    real, table = mounts.MOUNTINFO.read_text(), tmp_path / "mountinfo"
    monkeypatch.setattr(mounts, "MOUNTINFO", table)

    def mount(options: str):
        table.write_text(mountinfo(real, str(folder), "nfs4", "fileserver:/export", options))
        return folder
    return mount


def test_the_mount_of_a_folder_is_the_longest_match_and_names_its_options(shared_mount):
    folder = shared_mount("rw,vers=4.2,acdirmax=30,nocto")
    mount = mounts.mount_of(folder / "runs" / "not-yet")  # a run folder not made yet: its nearest existing parent
    assert (mount.point, mount.fstype, mount.source) == (str(folder), "nfs4", "fileserver:/export")
    assert mount.option("acdirmax") == "30" and mount.option("nocto") == "" and mount.option("noac") is None


def test_nocto_stalls_the_barrier_and_default_nfs_does_not(shared_mount):
    stall = mounts.barrier_stall(mounts.mount_of(shared_mount("rw,vers=4.2,nocto,acdirmax=30")))
    assert "nocto" in stall and "30 s" in stall and "\n" not in stall
    assert mounts.barrier_stall(mounts.mount_of(shared_mount("rw,vers=4.2,hard,proto=tcp"))) is None


def test_doctor_and_the_plan_name_the_filesystem_and_warn_on_nocto(shared_mount, tmp_path):
    folder = shared_mount("rw,vers=3,nocto")
    check = doctor.check_run_filesystem(folder / "runs")
    assert check.status == "warn" and "nfs4 (fileserver:/export" in check.detail and "nocto" in check.detail
    assert check.info["mount_point"] == str(folder)
    plan = make_launch_plan(load_run_config("tiny").config, folder / "runs" / "tiny", gpus=0, cpu_cores=2,
                            dry_run=True)
    assert plan.see_filesystem.endswith("on nfs4 (fileserver:/export, mounted at " + str(folder) + ")")
    assert any(w.startswith(f"the SEE folder {folder}") and "nocto" in w for w in plan.warnings)
    shared_mount("rw,vers=3")
    assert doctor.check_run_filesystem(folder / "runs").status == "ok"


@pytest.fixture
def cuda_with_triton(monkeypatch):
    import torch
    import transformers.utils

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(transformers.utils, "is_triton_available", lambda: True)


def test_doctor_fails_without_a_c_compiler_where_trls_triton_kernels_run(cuda_with_triton, monkeypatch, tmp_path):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no gcc, no clang
    check = doctor.check_c_compiler()
    assert check.status == "fail" and "C compiler (gcc or clang)" in check.detail and "CC" in check.fix
    compiler = tmp_path / "my-cc"
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CC", f"{compiler} -m64")
    assert doctor.check_c_compiler().status == "ok"


def test_doctor_names_the_compiler_triton_would_use(cuda_with_triton, monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    check = doctor.check_c_compiler()
    assert check.status == "ok" and check.detail.startswith(shutil.which("gcc") or shutil.which("clang"))


def test_no_compiler_check_without_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("PATH", os.devnull)
    assert doctor.check_c_compiler() is None

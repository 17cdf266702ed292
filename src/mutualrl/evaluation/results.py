"""Evaluation results: one model's per-prompt completions and scores, and files holding them.

Paper, App. "Experimental Setup": "for each prompt we generate a single completion" with
greedy decoding; reward@1 is the mean verifier reward of those completions.

Two file shapes exist, and every reader here accepts both:

- a *model file* -- one :class:`ModelEvalResult` (``"format": "mutualrl-model-eval"``);
  the training loop writes one per policy and validation step to
  ``RUN/eval/<policy>/step-NNNNNN.json``;
- an *eval file* -- several models' results from ``mutualrl eval``
  (``"format": "mutualrl-eval"``, ``"results": [...]``).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_json_atomic
from mutualrl.errors import DataError, RunFolderError
from mutualrl.run_folder import RunPaths, read_bytes

MODEL_FORMAT = "mutualrl-model-eval"
#: Validation-line keys of task groups: ``eval/group/<group>/reward@1``.
GROUP_KEY_PREFIX, REWARD_KEY_SUFFIX = "eval/group/", "/reward@1"
EVAL_FORMAT = "mutualrl-eval"
FORMAT_VERSION = 1
_STEP_FILE = re.compile(r"^step-([0-9]+)\.json$")  # ASCII digits: a regex's \d also takes other scripts' digits


@dataclass
class PromptResult:
    """One prompt's greedy completion and its score (the task's verifier, or a run's reward functions)."""

    prompt_id: str
    task: str
    prompt: str
    completion: str
    answer: str
    extracted: str | None
    score: float


@dataclass
class ModelEvalResult:
    """One model's evaluation: every prompt's completion and score, and reward@1 overall and per task."""

    model: str
    records: list[PromptResult] = field(default_factory=list)
    #: Optional context: the policy name in a pool, the training step, the split, generation settings.
    policy: str | None = None
    step: int | None = None
    split: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: float | None = None
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    # -- summary ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """How the model is shown in tables: its policy name when it has one, else the model string."""
        return self.policy or self.model

    @property
    def tasks(self) -> list[str]:
        """Tasks evaluated, in first-seen order."""
        return list(dict.fromkeys(r.task for r in self.records))

    @property
    def n(self) -> int:
        return len(self.records)

    @property
    def reward_at_1(self) -> float | None:
        """Mean score over all prompts (None without prompts)."""
        if not self.records:
            return None
        return sum(r.score for r in self.records) / len(self.records)

    def reward_at_1_by_task(self) -> dict[str, float]:
        """Mean score per task."""
        sums: dict[str, list[float]] = defaultdict(list)
        for r in self.records:
            sums[r.task].append(r.score)
        return {task: sum(v) / len(v) for task, v in sums.items()}

    def reward_at_1_by_group(self, group_of: dict[str, str]) -> dict[str, float]:
        """Mean score per task group (e.g. problem family), from ``prompt_id -> group``; ungrouped prompts skipped."""
        sums: dict[str, list[float]] = defaultdict(list)
        for r in self.records:
            if r.prompt_id in group_of:
                sums[group_of[r.prompt_id]].append(r.score)
        return {group: sum(v) / len(v) for group, v in sorted(sums.items())}

    def counts_by_task(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for r in self.records:
            counts[r.task] += 1
        return dict(counts)

    def scores(self) -> dict[str, float]:
        """prompt_id -> score."""
        return {r.prompt_id: r.score for r in self.records}

    def metrics(self, prefix: str = "eval/", group_of: dict[str, str] | None = None) -> dict[str, float | int]:
        """The validation row of the run's metrics: ``eval/reward@1``, ``eval/<task>/reward@1``, ``eval/n``,
        and with ``group_of`` (``prompt_id -> group``) ``eval/group/<group>/reward@1``."""
        out: dict[str, float | int] = {f"{prefix}n": self.n}
        if self.reward_at_1 is not None:
            out[f"{prefix}reward@1"] = self.reward_at_1
        by_task = self.reward_at_1_by_task()
        if len(by_task) > 1:
            for task, value in by_task.items():
                out[f"{prefix}{task}/reward@1"] = value
        for group, value in self.reward_at_1_by_group(group_of or {}).items():
            out[f"{GROUP_KEY_PREFIX}{group}{REWARD_KEY_SUFFIX}"] = value
        return out

    # -- serialisation -----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (write it with ``json.dump`` or :meth:`save`), summary included."""
        return {
            "format": MODEL_FORMAT,
            "version": FORMAT_VERSION,
            "model": self.model,
            "policy": self.policy,
            "step": self.step,
            "split": self.split,
            "tasks": self.tasks,
            "n": self.n,
            "reward@1": self.reward_at_1,
            "reward@1_by_task": self.reward_at_1_by_task(),
            "n_by_task": self.counts_by_task(),
            "settings": self.settings,
            "seconds": self.seconds,
            "created": self.created,
            "records": [asdict(r) for r in self.records],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | str | bytes, origin: str = "<json>") -> ModelEvalResult:
        """Rebuild from :meth:`to_json` output (a dict, or its JSON text)."""
        if isinstance(data, (str, bytes)):
            data = decode_json(data, origin)
        if not isinstance(data, dict):
            raise DataError(f"{origin}: a model result must be a JSON object")
        if data.get("format") not in (MODEL_FORMAT, None):
            raise DataError(f"{origin}: format {data.get('format')!r} is not {MODEL_FORMAT!r}")
        if "model" not in data or "records" not in data:
            missing = [k for k in ("model", "records") if k not in data]
            raise DataError(f"{origin}: model result lacks field(s) {', '.join(missing)}")
        if not isinstance(data["records"], list):
            raise DataError(f"{origin}: records: a JSON {type(data['records']).__name__} where a list belongs")
        check_field_types(data, origin)
        records = [prompt_result(raw, i, origin) for i, raw in enumerate(data["records"])]
        check_unique_prompts(records, origin)
        return cls(
            model=str(data["model"]),
            records=records,
            policy=data.get("policy"),
            step=data.get("step"),
            split=data.get("split"),
            settings=dict(data.get("settings") or {}),
            seconds=data.get("seconds"),
            created=str(data.get("created", "")),
        )

    def save(self, path: str | Path) -> Path:
        """Write this result as a model file (atomically: readers never see half a file)."""
        return write_json_atomic(path, self.to_json(), ensure_ascii=False)

    @classmethod
    def load(cls, path: str | Path) -> ModelEvalResult:
        results = load_results(path)
        if len(results) != 1:
            raise DataError(f"{path}: holds {len(results)} model results, expected one")
        return results[0]


def save_eval_file(path: str | Path, results: list[ModelEvalResult], meta: dict[str, Any] | None = None) -> Path:
    """Write several models' results as one eval file (``mutualrl eval`` output)."""
    data = {
        "format": EVAL_FORMAT,
        "version": FORMAT_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **(meta or {}),
        "results": [r.to_json() for r in results],
    }
    return write_json_atomic(path, data, ensure_ascii=False)


#: A model result's optional fields and the JSON types each may hold (a hand edit or a bug wrote others).
RESULT_FIELD_TYPES: dict[str, tuple[type, ...]] = {"policy": (str,), "step": (int,), "split": (str,),
                                                   "settings": (dict,), "seconds": (int, float)}


def check_field_types(data: dict[str, Any], origin: str) -> None:
    """One line naming ``origin`` and the field where an optional field of a model result has another JSON type
    (a step of ``"3"``, settings as a list: each was a traceback further on)."""
    for name, types in RESULT_FIELD_TYPES.items():
        value = data.get(name)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            raise DataError(f"{origin}: {name}: {str(value)[:80]!r} (a JSON {type(value).__name__}) where "
                            f"{' or '.join(t.__name__ for t in types)} belongs")


def json_number(value: Any, where: str) -> float:
    """``value`` as a finite number when it is one in the JSON (an integer or a float), else one line naming
    ``where``. Nothing is converted: Python's ``float()`` reads the string ``"250_25"`` as 25025 and ``"nan"``
    as NaN, and a bool is an integer to it; a record holding any of these was written by something else than
    mutualrl, and its score is not what it looks like."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(f"{where} {str(value)[:80]!r} (a JSON {json_type(value)}) is not a number")
    if isinstance(value, int) and abs(value) > FLOAT_MAX:  # float() of it would raise OverflowError
        raise DataError(f"{where} {str(value)[:40]}... is beyond a float's range")
    if not math.isfinite(value):
        raise DataError(f"{where} {value!r} is not a finite number")
    return float(value)


FLOAT_MAX = 1.7976931348623157e308
SCORE_MAX = 1e12
"""A score's largest magnitude: far beyond any reward (a verifier's is 0 or 1; weighted reward functions a few
units), and small enough that a report's sums of squares over millions of rows stay finite."""


def score_number(value: Any, where: str) -> float:
    """A record's score: :func:`json_number`, within :data:`SCORE_MAX` of 0, else one line naming ``where``."""
    score = json_number(value, where)
    if abs(score) > SCORE_MAX:
        raise DataError(f"{where} {score:g} is out of any reward's range (at most {SCORE_MAX:g} either side of 0)")
    return score


def json_type(value: Any) -> str:
    """The JSON name of ``value``'s type (what the file holds), for messages."""
    names = {bool: "boolean", str: "string", int: "number", float: "number", list: "array", dict: "object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


#: A record's fields that must be text when present (``None``/absent: empty); ``prompt_id`` and ``task`` key it.
TEXT_FIELDS = ("prompt", "completion", "answer")


def prompt_result(raw: Any, i: int, origin: str) -> PromptResult:
    """Record ``i`` of a model result; a record that is not an object, lacks a field, whose prompt id or task is not
    text, or whose score is not a finite JSON number is one line naming ``origin``, the record and the field (a NaN
    score made statistics raise; a score written as a string was read as the number it spells)."""
    if not isinstance(raw, dict):
        raise DataError(f"{origin}: record {i} is not an object")
    missing = [k for k in ("prompt_id", "task", "score") if k not in raw]
    if missing:
        raise DataError(f"{origin}: record {i} lacks field(s) {', '.join(missing)}")
    score = score_number(raw["score"], f"{origin}: record {i}: score")
    for name in ("prompt_id", "task"):
        if not isinstance(raw[name], str) or not raw[name]:
            raise DataError(f"{origin}: record {i}: {name} {str(raw[name])[:80]!r} (a JSON {json_type(raw[name])}) "
                            "is not a non-empty string")
    for name in (*TEXT_FIELDS, "extracted"):
        value = raw.get(name)
        if value is not None and not isinstance(value, str):
            raise DataError(f"{origin}: record {i}: {name}: a JSON {json_type(value)} where text belongs")
    return PromptResult(prompt_id=raw["prompt_id"], task=raw["task"], prompt=raw.get("prompt") or "",
                        completion=raw.get("completion") or "", answer=raw.get("answer") or "",
                        extracted=raw.get("extracted"), score=score)


def check_unique_prompts(records: list[PromptResult], origin: str) -> None:
    """Each prompt is scored once in a model result: a prompt id twice (a concatenated or hand-merged file) would
    weigh that prompt twice in reward@1 and pair with whichever copy a reader keeps; refused in one line naming
    both records."""
    seen: dict[str, int] = {}
    for i, record in enumerate(records):
        first = seen.setdefault(record.prompt_id, i)
        if first != i:
            raise DataError(f"{origin}: records {first} and {i} both score prompt {record.prompt_id[:120]!r}; a "
                            "model result scores each prompt once (was it merged from several files?)")


def decode_json(text: str | bytes, origin: str) -> Any:
    """The JSON value of ``text``; a JSON string holding JSON (``json.dump`` of already-encoded text) is decoded once
    more. Text that is not JSON, at either level, is one line naming ``origin``."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise DataError(f"{origin}: not valid JSON ({str(err)[:200]})") from None
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except (json.JSONDecodeError, RecursionError) as err:
            raise DataError(f"{origin}: holds a JSON string whose text is not JSON ({str(err)[:200]})") from None
        if isinstance(data, str):
            raise DataError(f"{origin}: holds a JSON string inside a JSON string, not a result")
    return data


def _read_json(path: Path) -> Any:
    try:
        text = read_bytes(path).decode("utf-8", errors="replace")  # a FIFO or a folder: named, never waited on
    except (OSError, RunFolderError) as err:
        raise DataError(f"{path}: cannot read ({getattr(err, 'strerror', None) or err})") from None
    return decode_json(text, str(path))


def step_files(folder: Path) -> dict[int, Path]:
    """``step-NNNNNN.json`` files of a policy's eval folder, by step."""
    out = {}
    for f in folder.iterdir() if folder.is_dir() else []:
        m = _STEP_FILE.match(f.name)
        if m:
            out[int(m.group(1))] = f
    return out


def load_results(path: str | Path, step: int | str | None = None) -> list[ModelEvalResult]:
    """Model results from an eval file, a model file, or a run folder.

    For a run folder (or its ``eval/`` folder) each policy's results at ``step`` are read
    from ``eval/<policy>/step-NNNNNN.json``: ``step`` is a number, ``"first"``, or ``"last"``
    (default: the last step that every policy has).
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file or folder")
    if path.is_dir():
        return _load_run_folder(path, step)
    data = _read_json(path)
    if isinstance(data, dict) and data.get("format") == EVAL_FORMAT:
        items = data.get("results")
        if not isinstance(items, list):
            raise DataError(f"{path}: eval file has no 'results' list")
        return [ModelEvalResult.from_json(item, f"{path} (results[{i}])") for i, item in enumerate(items)]
    result = ModelEvalResult.from_json(data, str(path))
    if result.step is None:
        m = _STEP_FILE.match(path.name)
        if m:
            result.step = int(m.group(1))
    if result.policy is None and _STEP_FILE.match(path.name):
        result.policy = path.parent.name
    return [result]


def _load_run_folder(path: Path, step: int | str | None) -> list[ModelEvalResult]:
    eval_dir = RunPaths(path).eval_dir if RunPaths(path).eval_dir.is_dir() else path
    policies = sorted(d for d in eval_dir.iterdir() if d.is_dir() and step_files(d))
    if not policies:
        if step_files(eval_dir):  # a single policy's folder
            policies = [eval_dir]
        else:
            raise DataError(f"{path}: no eval/<policy>/step-NNNNNN.json files (is it a run folder?)")
    by_policy = {d: step_files(d) for d in policies}
    if step is None or step == "last":
        common = set.intersection(*(set(s) for s in by_policy.values()))
        if not common:
            raise DataError(f"{path}: the policies share no validation step "
                            + "; ".join(f"{d.name}: {sorted(s)}" for d, s in by_policy.items()))
        chosen = max(common)
    elif step == "first":
        common = set.intersection(*(set(s) for s in by_policy.values()))
        if not common:
            raise DataError(f"{path}: the policies share no validation step")
        chosen = min(common)
    else:
        chosen = int(step)
    results = []
    for d, steps in by_policy.items():
        if chosen not in steps:
            raise DataError(f"{d}: no validation results at step {chosen} (steps: {sorted(steps)})")
        results.extend(load_results(steps[chosen]))
    return results


def load_many(paths: list[str | Path], step: int | str | None = None) -> list[ModelEvalResult]:
    """Results from several files / run folders, in order."""
    out: list[ModelEvalResult] = []
    for p in paths:
        out.extend(load_results(p, step))
    return out


NO_VALUE = "-"
"""How every table of mutualrl shows a missing or undefined value (None)."""


def fmt_number(value: float | None, digits: int = 4) -> str:
    """``value`` with ``digits`` decimals, or :data:`NO_VALUE` for None."""
    return NO_VALUE if value is None else f"{value:.{digits}f}"


def fmt_change(before: float | None, after: float | None, digits: int = 3) -> str:
    """``after - before`` with its sign and ``digits`` decimals, or :data:`NO_VALUE` when either is None."""
    return NO_VALUE if before is None or after is None else f"{after - before:+.{digits}f}"


def markdown_table(results: list[ModelEvalResult], tasks: list[str] | None = None) -> str:
    """reward@1 per task (columns) per model (rows), with the mean over tasks and prompt counts."""
    if tasks is None:
        tasks = list(dict.fromkeys(t for r in results for t in r.tasks))
    header = ["model", *tasks]
    if len(tasks) > 1:
        header.append("mean")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([" --- "] + [" ---: "] * (len(header) - 1)) + "|"]
    for r in results:
        by_task = r.reward_at_1_by_task()
        counts = r.counts_by_task()
        cells = [r.name]
        values = []
        for t in tasks:
            if t in by_task:
                cells.append(f"{fmt_number(by_task[t])} (n={counts[t]})")
                values.append(by_task[t])
            else:
                cells.append(NO_VALUE)
        if len(tasks) > 1:
            cells.append(fmt_number(sum(values) / len(values) if values else None))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def group_rewards(line: dict[str, Any], where: str | Path = "a metrics row") -> dict[str, float]:
    """``group -> reward@1`` from one validation row of a run's metrics (empty if it has no groups); a value that
    is not a finite number is one line naming ``where`` (the metrics file), the policy, the step and the field."""
    return {key[len(GROUP_KEY_PREFIX):-len(REWARD_KEY_SUFFIX)]: metric_value(line, key, where) for key in sorted(line)
            if key.startswith(GROUP_KEY_PREFIX) and key.endswith(REWARD_KEY_SUFFIX)}


def metric_value(line: dict[str, Any], key: str, where: str | Path = "a metrics row") -> float:
    """``line[key]`` as a finite number, else one line naming ``where``, the row's policy and step, and ``key``."""
    value = line.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise DataError(f"{where}: the {str(line.get('policy'))[:80]} validation row of step {line.get('step')}: "
                        f"{key[:200]}: {str(value)[:80]!r} is not a finite number")
    return float(value)

"""What a finished run was: its resolved settings as flat ``key -> value`` pairs, its user code and data by content
(the digests of ``RUN/inputs.json``), and the words that tell runs apart.

``report`` and ``plot --group-by`` pool runs that differ only in the seed, and name every other difference; a data
file spelled as two paths is one input (its sha256 is the same), a file edited between runs is two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.config.typed import flatten
from mutualrl.errors import DataError
from mutualrl.run_folder import RunPaths

#: The setting that tells replicate runs apart.
SEED_KEY = "grpo.seed"
#: Short names of ``--by`` keys.
KEY_ALIASES = {"regime": "regime.name", "seed": SEED_KEY, "pool": "pool.name", "task": "task.name"}
#: Settings that change where and how a run ran, not what it learned.
PLACE_PREFIXES = ("output_dir", "launch.", "see.dir", "see.barrier_timeout_s", "see.peer_timeout_s",
                  "see.poll_interval_s", "task.source")
#: How a setting is shown in a label (the rest: its last part).
SHORT_NAMES = {"grpo.learning_rate": "lr", "grpo.beta": "β", "grpo.num_generations": "K", "grpo.max_steps": "steps",
               "grpo.temperature": "T", "schedule.max_steps": "steps"}


@dataclass
class RunSettings:
    """One run folder's settings, flat (``grpo.learning_rate``), with ``data:<file>`` and ``code:<module>``
    standing for the content the run read."""

    path: Path
    values: dict[str, Any]

    @property
    def regime(self) -> str:
        return str(self.values.get("regime.name", "run"))

    @property
    def seed(self) -> Any:
        return self.values.get(SEED_KEY)

    def get(self, key: str) -> Any:
        return self.values.get(resolve_key(key))


def resolve_key(key: str) -> str:
    return KEY_ALIASES.get(key, key)


def read_settings(run: Path) -> RunSettings:
    """``RUN/config.yaml`` flattened, with the digests of ``RUN/inputs.json`` in place of the data's path."""
    from mutualrl.config.yaml_strict import load_yaml
    from mutualrl.inputs_record_reader import recorded_inputs
    from mutualrl.run_folder import read_bytes

    paths = RunPaths(run)
    if not paths.config.is_file():
        raise DataError(f"{run}: no config.yaml (is it a run folder written by `mutualrl train`?)")
    recipe = load_yaml(read_bytes(paths.config).decode("utf-8", errors="replace"), str(paths.config))
    if not isinstance(recipe, dict):
        raise DataError(f"{paths.config}: not a mapping")
    values = flatten(recipe)  # a list stays a list: differences compare repr()
    record = recorded_inputs(paths)  # each entry's type checked: a damaged one is one line naming it
    if record is not None:  # the data and code by content: the same file under two paths is one input
        values.update({f"data:{name}": digest for name, digest in record["data"].items()})
        values.update({f"code:{module}": (entry or {}).get("sha256") for module, entry in record["code"].items()})
    else:
        values["task.source (no inputs.json)"] = values.get("task.source")
    return RunSettings(run, values)


def is_inactive(key: str, regime: str) -> bool:
    """A setting of another regime than the run's (``regime.prp.*`` of an SGT run) changes nothing it did."""
    parts = key.split(".")
    return len(parts) > 2 and parts[0] == "regime" and parts[1] != regime.replace("-", "_") and parts[1] != regime


def counts(key: str) -> bool:
    """Whether a difference in ``key`` is a difference in what was trained (not where or how it ran)."""
    return key != SEED_KEY and not any(key == p.rstrip(".") or key.startswith(p) for p in PLACE_PREFIXES)


def differing_keys(runs: Sequence[RunSettings], ignore: Sequence[str] = ()) -> list[str]:
    """The settings that differ between ``runs`` (the seed, the run's place and ``ignore`` left out; a setting of a
    regime none of the runs used left out)."""
    keys = sorted({key for run in runs for key in run.values})
    regimes = {run.regime for run in runs}
    ignored = {resolve_key(key) for key in ignore}
    return [key for key in keys if counts(key) and key not in ignored
            and not all(is_inactive(key, regime) for regime in regimes)
            and len({repr(run.values.get(key)) for run in runs}) > 1]


def describe_difference(key: str, runs: Sequence[RunSettings]) -> str:
    """``grpo.learning_rate: 1e-05 (sgt-seed1, sgt-seed2), 2e-05 (sgt-seed3)``."""
    by_value: dict[str, list[str]] = {}
    for run in runs:
        by_value.setdefault(shown(run.values.get(key)), []).append(run.path.name)
    return f"{key}: " + ", ".join(f"{value} ({', '.join(names)})" for value, names in by_value.items())


def shown(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return f"sha256 {value[:10]}…"  # a digest: enough to tell two apart
    return str(value)


def label_for(run: RunSettings, keys: Sequence[str]) -> str:
    """A run's (or a group's) label from the settings that differ: ``prp (peer)``, ``sgt (lr 0.0001)``."""
    keys = [resolve_key(key) for key in keys]
    head = run.regime if "regime.name" in keys else ""
    parts = [short_setting(key, run) for key in keys if key != "regime.name" and not is_inactive(key, run.regime)]
    parts = [part for part in parts if part]
    if not head:
        return ", ".join(parts) or run.regime
    return f"{head} ({', '.join(parts)})" if parts else head


def short_setting(key: str, run: RunSettings) -> str:
    value = shown(run.values.get(key))
    if key.startswith(f"regime.{run.regime}.") or key.startswith("data:") or key.startswith("code:"):
        return value if not key.startswith(("data:", "code:")) else f"{key.split(':', 1)[1]} {value}"
    return f"{SHORT_NAMES.get(key, key.rsplit('.', 1)[-1])} {value}"

"""Settings that send a run's weights, completions or metrics to a place: a stored run folder does not choose them.

``--resume`` goes on from the run folder's own ``config.yaml``. A run folder is data (docs/run-layout.md, "What is
trusted"), so a setting there that would make the resumed run send something elsewhere (the Hub, a tracker, a vLLM
server, an exchange folder outside the run, another machine's rendezvous) is taken only when the command running now
gives it again (``--set``, or the option that sets it); otherwise the resume is refused in one line naming the file
and the fields. A machine joining a run compares the whole shared config with its own
(``launch/secondary_machine.py``), so there every such setting comes from its own command as well.

Which settings those are, and when a value sends, each field declares (``leaves`` in its metadata, GRPOConfig's in
:data:`mutualrl.config.grpo_schema.GRPO_FIELD_RULES`; the kinds: :data:`mutualrl.config.field_rules.LEAVES`).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mutualrl.config.field_table import DeclaredField, outbound_fields, outbound_grpo_fields
from mutualrl.config.grpo_schema import grpo_default
from mutualrl.config.loader import apply_override, parse_override
from mutualrl.config.schema import RunConfig
from mutualrl.config.typed import ConfigError
from mutualrl.errors import UsageError
from mutualrl.training.trackers import tracker_names

LEAVING_GRPO_FIELDS = outbound_grpo_fields()
"""TRL 1.16's ``GRPOConfig`` fields (its own and ``TrainingArguments``') that may send something elsewhere, each with
the kind of its ``leaves`` declaration (:data:`mutualrl.config.grpo_schema.GRPO_FIELD_RULES`)."""
LOCAL_TRACKERS = {"tensorboard"}
"""Trackers that write only files under the run folder."""


def given_now(config: RunConfig, overrides: Iterable[str], option_keys: Iterable[str]) -> dict[str, Any]:
    """What the command running now sets: ``config``'s shape (its policies, by name) holding only the keys its
    ``--set`` overrides and dedicated options (dotted ``option_keys``) name."""
    given: dict[str, Any] = {"grpo": {}, "see": {}, "launch": {},
                             "pool": {"policies": [{"name": p.name, "grpo": {}} for p in config.pool.policies]}}
    parsed = [parse_override(text) for text in overrides] + [(key.split("."), None) for key in option_keys]
    for keys, value in parsed:
        try:
            apply_override(given, keys, copy.deepcopy(value))
        except ConfigError:  # a key the loaded config took differently: it set nothing outbound here
            continue
    return given


def stored_outbound(config: RunConfig, given: dict[str, Any], run_folder: Path) -> list[str]:
    """The keys of ``config`` that send something elsewhere and that the command running now (``given``) did not
    set: each the shared key, or a policy's own where the policy's value wins."""
    shared_now = _keys(given.get("grpo"))
    policies_now = {str(p.get("name")): _keys(p.get("grpo")) for p in _policies(given)}
    found: list[str] = []
    for policy in config.pool.policies:
        merged = {**config.grpo, **policy.grpo}
        own_now = policies_now.get(policy.name, set())
        for name in LEAVING_GRPO_FIELDS:
            if name not in merged or not sends(name, merged[name]):
                continue
            if name in own_now or (name in shared_now and name not in policy.grpo):
                continue
            key = f"pool.policies.{policy.name}.grpo.{name}" if name in policy.grpo else f"grpo.{name}"
            found.append(key)
    for declared in outbound_fields():
        section, name = declared.key.rsplit(".", 1)
        if name not in _keys(given.get(section)) and field_sends(declared, config, run_folder):
            found.append(declared.key)
    return list(dict.fromkeys(found))


def sends(name: str, value: Any) -> bool:
    """Whether GRPOConfig field ``name`` set to ``value`` sends something elsewhere: by its ``leaves`` kind, a value
    other than its default, or ``report_to`` naming a tracker beyond :data:`LOCAL_TRACKERS`."""
    if LEAVING_GRPO_FIELDS[name] == "trackers":
        return not set(tracker_names(value)) <= LOCAL_TRACKERS
    return value != grpo_default(name)


def field_sends(declared: DeclaredField, config: RunConfig, run_folder: Path) -> bool:
    """Whether a schema field that may send data off this machine does with ``config``'s value: a ``path`` outside
    ``run_folder``, an ``address`` other than its default on a run of several machines."""
    value = functools.reduce(getattr, declared.key.split("."), config)
    kind = declared.rules["leaves"]
    if kind == "path":
        return bool(value) and not Path(value).resolve().is_relative_to(run_folder.resolve())
    if kind == "address":
        return config.launch.nodes > 1 and value != declared.default
    return value != declared.default


def refuse_stored_outbound(config: RunConfig, given: dict[str, Any], run_folder: Path) -> None:
    """``--resume`` of ``run_folder``: one line naming its config.yaml and the fields that would send something to a
    place the folder alone chose."""
    found = stored_outbound(config, given, run_folder)
    if found:
        shown = ", ".join(found[:6]) + (f" and {len(found) - 6} more" if len(found) > 6 else "")
        raise UsageError(f"{run_folder / 'config.yaml'}: {shown[:400]} would send the run's weights, completions or "
                         "metrics to a place this run folder names, and a run folder is data that does not choose "
                         "that by itself; give them again to this command (--set KEY=VALUE) if you mean them")


def _keys(mapping: Any) -> set[str]:
    return set(mapping) if isinstance(mapping, dict) else set()


def _policies(given: dict[str, Any]) -> list[dict[str, Any]]:
    pool = given.get("pool") if isinstance(given.get("pool"), dict) else {}
    policies = pool.get("policies")
    return [p for p in policies if isinstance(p, dict)] if isinstance(policies, list) else []

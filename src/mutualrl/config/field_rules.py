"""What the rest of mutualrl asks of a settings field, declared once in the field's own metadata.

Every field of the run's configuration (:mod:`mutualrl.config.schema`) carries, beside its ``help``, the answers
that other places would otherwise keep in lists of their own:

- ``resume``: whether ``--resume`` may change it (:data:`MAY_CHANGE`: how long to train, how to report, where to
  run) or it is the run's identity (:data:`IDENTITY`: refused, ``launch/rundir/resume.py``);
- ``leaves``: whether its value sends the run's weights, completions or metrics off this machine, and when
  (:data:`LEAVES`); a stored run folder alone does not choose such a value on resume
  (``launch/rundir/export_settings.py``);
- ``group``: the heading it is listed under on the generated settings page (``docs/settings.md``);
- ``regimes``: which regimes read it (:data:`REGIMES`);
- optionally ``lock_step``: its value under which peers exchange records round for round (the paper's barrier);
  a regime whose spec says ``lock_step_only`` refuses any other value when the recipe is read
  (:func:`mutualrl.config.validate.validate_run_config`);
- optionally ``flag``: the ``mutualrl train`` option that sets it (``--gpus``); the option's help and lower bound are
  the field's (``cli/train_cmd.py``), and the launcher applies it to this key (``launch/run.py``).

A field declares them with ``**rules(...)`` in its metadata; ``tests/test_settings_page.py`` fails on a field that
does not. TRL's GRPOConfig fields are not ours to annotate: the few mutualrl asks about are declared in
:data:`mutualrl.config.grpo_schema.GRPO_FIELD_RULES`, in the same words.
"""

from __future__ import annotations

from typing import Any

IDENTITY = "identity"
"""The run's identity: a resumed run that changes it is refused."""
MAY_CHANGE = "may change"
"""How long to train, how to report, where to run: a resumed run may change it."""
RESUME = (IDENTITY, MAY_CHANGE)

LEAVES = {
    None: "stays on this machine",
    "value": "sends data elsewhere when it differs from its default",
    "trackers": "sends metrics elsewhere when it names a tracker that writes beyond the run folder",
    "path": "sends data to that folder when it lies outside the run folder",
    "address": "sends data to that address when the run spans several machines and it differs from its default",
}
"""The kinds of ``leaves``, and when a value of that kind sends something off this machine."""

REGIMES = {
    "any": "every regime",
    "exchange": "the regimes that publish records",
    "peers": "the regimes that read peers",
    "alone": "standalone",
    "own": "the regime the settings belong to",
}
"""The kinds of ``regimes``: which regimes read the field."""

DECLARED = ("resume", "leaves", "group", "regimes")
"""The keys every field's metadata holds (``lock_step`` and ``flag`` are optional)."""

NOT_GIVEN = object()


def rules(group: str, *, resume: str, leaves: str | None = None, regimes: str = "any",
          lock_step: Any = NOT_GIVEN, flag: str | None = None) -> dict[str, Any]:
    """A field's declarations, to unpack into its metadata: ``metadata={"help": ..., **rules("Timeouts",
    resume=MAY_CHANGE)}``. ``group`` and ``resume`` have no default: a new field says both."""
    if resume not in RESUME:
        raise ValueError(f"resume must be one of {RESUME}, got {resume!r}")
    if leaves not in LEAVES:
        raise ValueError(f"leaves must be one of {list(LEAVES)}, got {leaves!r}")
    if regimes not in REGIMES:
        raise ValueError(f"regimes must be one of {list(REGIMES)}, got {regimes!r}")
    declared: dict[str, Any] = {"group": group, "resume": resume, "leaves": leaves, "regimes": regimes}
    if lock_step is not NOT_GIVEN:
        declared["lock_step"] = lock_step
    if flag is not None:
        if not flag.startswith("--"):
            raise ValueError(f"flag must be a long option (--name), got {flag!r}")
        declared["flag"] = flag
    return declared


def missing(metadata: Any) -> list[str]:
    """The declarations (:data:`DECLARED`) a field's metadata lacks."""
    return [key for key in DECLARED if key not in metadata]

"""What a regime's ``spec.py`` writes: its :class:`RegimeSpec` (with its :class:`RegimeFlag` options), registered
with :func:`register_regime`.

A regime is one folder ``mutualrl/regimes/<name>/`` whose torch-free ``spec.py`` declares the regime here: its
settings dataclass, the metrics on its status line and their words in a plot (:class:`~mutualrl.metric_labels.
MetricWords`), its adapter by import path (imported only by the training layer). Finding the regimes (importing every
``spec.py`` and the ``MUTUALRL_REGIMES`` modules) and looking them up is :mod:`mutualrl.regimes.core.registry`'s; this
module is the definition a regime author uses (through :mod:`mutualrl.regimes.api`), and the table
:func:`register_regime` fills. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mutualrl.metric_labels import MetricWords

BASE_ADAPTER = "mutualrl.regimes.core.adapter:RegimeAdapter"


@dataclass(frozen=True)
class RegimeFlag:
    """An option of ``mutualrl train`` that sets one field of its regime's settings (``--prp-denominator``)."""

    flag: str
    """The option as typed, ``--<regime>-<field>``."""
    setting: str
    """The field of the regime's settings dataclass it sets."""
    help: str = ""
    """Its ``--help`` text; empty: the settings field's own help, for this regime only (``cli/train_cmd.py``)."""


@dataclass(frozen=True)
class RegimeSpec:
    """Everything the rest of mutualrl needs to know about one regime."""

    name: str
    """The name in recipes (``regime.name``), on the command line (``--regime``) and in metric keys."""
    help: str
    """One line for ``--help`` (what the regime does)."""
    needs_peers: bool = False
    """Reads peers' records each step: needs >= 2 policies that draw identical prompts."""
    needs_exchange: bool = False
    """Publishes records to the SEE every step (always true when ``needs_peers``)."""
    settings_key: str | None = None
    """Key of its settings under ``regime:`` in a recipe (``regime.sgt.lam``), if it has settings."""
    settings: type | None = None
    """The settings dataclass (a ``help`` per field)."""
    adapter: str = BASE_ADAPTER
    """The trainer adapter, ``"module:Class"`` (a :class:`~mutualrl.regimes.core.adapter.RegimeAdapter`), imported
    only by the training layer."""
    status: tuple[tuple[str, str], ...] = ()
    """(metric, label) shown on the live status line (the policy's status file and the launcher's progress);
    the metric is logged as ``<name>/<metric>``."""
    metrics: tuple[tuple[str, MetricWords], ...] = ()
    """(metric, its words: title, y label and y scale) for the figures of ``mutualrl plot``; the metric is logged as
    ``<name>/<metric>``; one without words is titled by its key, on its values' own range."""
    check: Callable[[Any], tuple[str, str] | None] | None = None
    """Cross-field check of the settings: None, or (field, problem)."""
    grpo_defaults: tuple[tuple[str, Any], ...] = ()
    """GRPO fields (``grpo.<field>``, value) the regime's objective is defined with: applied to a policy whose recipe
    leaves the field unset (the plan's merge, ``launch_plan._policy_grpo``); a recipe that sets another value meets
    :attr:`grpo_check`."""
    grpo_check: Callable[[Mapping[str, Any]], tuple[str, str] | None] | None = None
    """Check of one policy's GRPO fields (the recipe's, shared and the policy's own, without the defaults above)
    when this regime runs: None, or (field, problem)."""
    state_check: Callable[[Mapping[str, Any]], str | None] | None = None
    """Check of the running state its adapter's ``state_dict`` saved, as read back from a checkpoint (torch-free;
    the launcher's check of a checkpoint and the worker both apply it, :mod:`mutualrl.regimes.core.state_file`):
    None, or what is wrong with it."""
    order: int = 100
    """Position in listings (help, error messages)."""
    flags: tuple[RegimeFlag, ...] = ()
    """Options of ``mutualrl train`` that set one of its settings."""
    lock_step_only: bool = False
    """Needs every peer's records of the very same round (OPD: the peers judge this round's rollouts), so it runs
    under the paper's lock-step barrier only: a recipe that leaves it (see.max_staleness > 0, see.on_peer_failure
    continue, see.replay_consumption; each such field declares its lock-step value) is refused when it is read."""
    parent: str | None = None
    """The regime this one is a variant of (its name): the variant's settings dataclass subclasses the parent's, and a
    recipe's ``regime.<parent key>`` values reach the variant's settings unless its own section sets them
    (docs/architecture.md, "A regime variant in three files")."""
    batch: type | None = None
    """The keys it adds to TRL's batch beyond every regime's (:class:`~mutualrl.regimes.core.trainer_interface.
    GRPOBatch`): a ``GRPOBatch`` subclass in its own folder, each key with its shape (SGT's ``SGTBatch``)."""

    def __post_init__(self) -> None:
        if (self.settings_key is None) != (self.settings is None):
            raise ValueError(f"regime {self.name!r}: give settings_key and settings together")
        if self.flags and self.settings is None:
            raise ValueError(f"regime {self.name!r}: flags set settings, and it has none")
        if self.needs_peers and not self.needs_exchange:
            object.__setattr__(self, "needs_exchange", True)

    @property
    def batch_keys(self) -> frozenset[str]:
        """The batch keys this regime adds (:attr:`batch`); none for a regime that adds none."""
        from mutualrl.regimes.core.trainer_interface import GRPOBatch

        return frozenset() if self.batch is None else frozenset(self.batch.__optional_keys__
                                                                - GRPOBatch.__optional_keys__)

    @property
    def status_keys(self) -> tuple[tuple[str, str], ...]:
        """(full metric key, label) for the status line."""
        return tuple((f"{self.name}/{metric}", label) for metric, label in self.status)

    @property
    def metric_keys(self) -> dict[str, MetricWords]:
        """Full metric key -> its words in a plot."""
        return {f"{self.name}/{metric}": words for metric, words in self.metrics}


REGISTERED: dict[str, RegimeSpec] = {}
"""Every registered regime by name: filled by :func:`register_regime` as a ``spec.py`` is imported, read by
:mod:`mutualrl.regimes.core.registry` (which imports the specs and looks regimes up)."""


def register_regime(spec: RegimeSpec) -> RegimeSpec:
    """Add ``spec``; a second, different spec under the same name (or settings key) is an error."""
    known = REGISTERED.get(spec.name)
    if known is not None and known != spec:
        raise ValueError(f"regime {spec.name!r} is already registered (by {known.adapter})")
    if spec.settings_key is not None:
        for other in REGISTERED.values():
            if other.name != spec.name and other.settings_key == spec.settings_key:
                raise ValueError(f"regime {spec.name!r}: settings key {spec.settings_key!r} is taken by {other.name!r}")
    REGISTERED[spec.name] = spec
    return spec


def unregister_regime(name: str) -> None:
    """Remove a regime (tests that register a throwaway one clean up with this)."""
    REGISTERED.pop(name, None)

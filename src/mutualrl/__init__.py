"""mutualrl: mutual reinforcement learning for heterogeneous LLM policies on TRL.

Subpackages, one per concept of the paper's system design:

- :mod:`mutualrl.see` -- Shared Experience Exchange (typed, file-backed rollout records)
- :mod:`mutualrl.thl` -- Tokenizer Heterogeneity Layer (retokenize, align traces)
- :mod:`mutualrl.regimes` -- PRP, XGRPO, SGT and controls, as pure functions
- :mod:`mutualrl.tasks` -- verifiable tasks and answer checkers
- :mod:`mutualrl.launch` -- MWRA placement and the per-policy process launcher
- :mod:`mutualrl.training` -- the TRL GRPOTrainer subclass and the policy worker
- :mod:`mutualrl.evaluation` -- greedy evaluation, complementarity, plots
- :mod:`mutualrl.pools` -- builtin pools (tiny, smol) and model assets
- :mod:`mutualrl.assets` -- offline tokenizers, models and data from package registries

The Python API, ``mutualrl.train(...)``, ``mutualrl.load_config(...)``, ``mutualrl.evaluate(...)``, lives in
:mod:`mutualrl.api` and runs exactly what the ``mutualrl`` command runs.
"""

from mutualrl.release import VERSION as __version__

_API = ("train", "load_config", "evaluate", "read_run", "RunResult")
"""The Python API (:mod:`mutualrl.api`, layer 7), imported on first use (PEP 562): ``import mutualrl`` stays as
light as before (no torch, no TRL), and this package's own imports still only go down the layers."""


def __getattr__(name: str):  # noqa: ANN202 - module attribute hook
    if name in _API:
        import importlib

        return getattr(importlib.import_module("mutualrl.api"), name)
    raise AttributeError(f"module 'mutualrl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])

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
"""

__version__ = "0.1.0"

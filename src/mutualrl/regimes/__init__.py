"""The sharing regimes (paper Sec. "Three Controlled Probes"): one folder per regime.

- ``regimes/<name>/`` — ``spec.py`` (torch-free: settings, metric names and words, status metric, registration),
  ``maths.py`` (pure tensor functions, tested by hand against the paper), ``adapter.py`` (TRL's batch
  <-> the maths; imported only by the training layer). The registry finds every such folder; ``mutualrl train
  --help`` lists the regimes, docs/regimes.md explains each. A variant's spec names its parent (``parent=``).
- :mod:`~mutualrl.regimes.api` — the one module of mutualrl a regime folder imports besides its own files: the
  spec and registration, the metric types and words, the seam the trainer hands a regime, the shared maths and the
  adapter's building blocks (docs/architecture.md, "Adding a regime").
- :mod:`~mutualrl.regimes.core` — the shared modules behind that API (the registry, which discovers every
  ``regimes/<name>/spec.py`` and the plugin modules named in ``MUTUALRL_REGIMES``; GRPO's maths; the base adapter),
  and the trainer's side that no regime imports (its records for the SEE, the quantile sketches).

Importing this package or a ``spec`` module never imports torch: config loading and every CLI
command import the registry.

Rewards of one learner are ``[P, K]`` (P prompts, K rollouts, TRL's prompt-major row order when
flattened); a pool is ``[P, M, K]``; peers are ``[P, M-1, K]``. NaN marks an unscorable reward,
as in TRL: it is left out of every statistic and its advantage is 0. See docs/regimes.md.
"""

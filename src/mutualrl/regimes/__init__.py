"""The sharing regimes (paper Sec. "Three Controlled Probes"): one folder per regime.

- :mod:`~mutualrl.regimes.registry` — one :class:`RegimeSpec` per regime; it discovers every
  ``regimes/<name>/spec.py`` (and plugin modules named in ``MUTUALRL_REGIMES``); docs/architecture.md.
- ``regimes/<name>/`` — ``spec.py`` (torch-free: settings, metric names and words, status metric, registration),
  ``maths.py`` (pure tensor functions, tested by hand against the paper), ``adapter.py`` (TRL's batch
  <-> the maths; imported only by the training layer): ``standalone``, ``xgrpo`` (Regime 2),
  ``sgt`` (Regime 3), ``prp`` (Regime 1), ``randpert`` (the ``grpo-randpert`` control), ``hacpo`` (HACPO,
  arXiv 2603.02604, on PRP's pooled rows).
- Shared by them: :mod:`~mutualrl.regimes.grpo` (standalone GRPO advantages, TRL-exact, Sec.
  "Preliminaries"), :mod:`~mutualrl.regimes.pool` (the ``[P, K]`` / ``[P, M, K]`` layout),
  :mod:`~mutualrl.regimes.usability` (App. "Channel decomposition"), :mod:`~mutualrl.regimes.importance` (the
  importance-ratio diagnostics and ESS of rows a learner did not sample), :mod:`~mutualrl.regimes.rank_metrics`
  (metrics reduced over the ranks), and for the adapters :mod:`~mutualrl.regimes.seam` (what the trainer hands a
  regime: ``GRPOBatch``, ``StepRollouts``, ``TrainerView``), :mod:`~mutualrl.regimes.adapter` (the base adapter),
  :mod:`~mutualrl.regimes.batch_rows` (batch surgery: rows appended to TRL's batch, auxiliary sequences),
  :mod:`~mutualrl.regimes.pooled_rows` / :mod:`~mutualrl.regimes.pooled_spec` (the peer rows PRP and HACPO pool,
  and their settings), :mod:`~mutualrl.regimes.peers` (peer tables as tensors, peer responses as learner token
  rows); a peer round is one call of the SEE (:func:`mutualrl.see.rounds.next_round`).

Importing this package or a ``spec`` module never imports torch: config loading and every CLI
command import the registry.

Rewards of one learner are ``[P, K]`` (P prompts, K rollouts, TRL's prompt-major row order when
flattened); a pool is ``[P, M, K]``; peers are ``[P, M-1, K]``. NaN marks an unscorable reward,
as in TRL: it is left out of every statistic and its advantage is 0. See docs/regimes.md.
"""

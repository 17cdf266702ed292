"""The sharing regimes (paper Sec. "Three Controlled Probes"): one folder per regime.

- :mod:`~mutualrl.regimes.core.regime_spec` — what a regime's ``spec.py`` writes (``RegimeSpec``, ``RegimeFlag``,
  ``register_regime``); :mod:`~mutualrl.regimes.core.registry` — it discovers every ``regimes/<name>/spec.py`` (and
  plugin modules named in ``MUTUALRL_REGIMES``) and looks regimes up; docs/architecture.md.
- ``regimes/<name>/`` — ``spec.py`` (torch-free: settings, metric names and words, status metric, registration),
  ``maths.py`` (pure tensor functions, tested by hand against the paper), ``adapter.py`` (TRL's batch
  <-> the maths; imported only by the training layer): ``standalone``, ``xgrpo`` (Regime 2),
  ``sgt`` (Regime 3), ``prp`` (Regime 1), ``randpert`` (the ``grpo-randpert`` control), ``hacpo`` (HACPO,
  arXiv 2603.02604, on PRP's pooled rows).
- Shared by their maths: :mod:`~mutualrl.regimes.core.grpo` (GRPO advantages, TRL-exact, Sec. "Preliminaries", and the
  same over a pool of policies), :mod:`~mutualrl.regimes.core.pool` (the ``[P, K]`` / ``[P, M, K]`` layout),
  :mod:`~mutualrl.evaluation.usability` (App. "Channel decomposition"), :mod:`~mutualrl.regimes.core.importance` (the
  importance-ratio diagnostics and ESS of rows a learner did not sample), :mod:`~mutualrl.regimes.core.rank_metrics`
  (the metric types a regime returns, by how each is reduced over the ranks).
- Shared by their adapters: :mod:`~mutualrl.regimes.core.seam` (what the trainer hands a regime: ``GRPOBatch``, the
  step object ``StepRollouts``, ``TrainerView``), :mod:`~mutualrl.regimes.core.adapter` (the base adapter),
  :mod:`~mutualrl.regimes.core.peers` (peer tables as ``[P, M-1, K]`` tensors), :mod:`~mutualrl.regimes.core.peer_responses`
  (peer responses as learner token rows), :mod:`~mutualrl.regimes.core.batch_rows` (batch surgery: rows appended to
  TRL's batch, auxiliary sequences), :mod:`~mutualrl.regimes.core.pooled_rows` / :mod:`~mutualrl.regimes.core.pooled_spec`
  (the peer rows PRP and HACPO pool, and their settings); a peer round is one call of the SEE
  (:func:`mutualrl.see.rounds.next_round`).
- The trainer's side, which no regime imports: :mod:`~mutualrl.regimes.core.publication` (this rank's records for the
  SEE, from TRL's batch) and :mod:`~mutualrl.regimes.core.quantile_sketch` (what a rank sends over for a quantile
  metric; the reduction over the ranks is ``training/trl_metrics.py``'s).

Importing this package or a ``spec`` module never imports torch: config loading and every CLI
command import the registry.

Rewards of one learner are ``[P, K]`` (P prompts, K rollouts, TRL's prompt-major row order when
flattened); a pool is ``[P, M, K]``; peers are ``[P, M-1, K]``. NaN marks an unscorable reward,
as in TRL: it is left out of every statistic and its advantage is 0. See docs/regimes.md.
"""

"""What the regimes share, behind :mod:`mutualrl.regimes.api` (a regime folder imports that, not these modules).

- Declaring and finding regimes: :mod:`.regime_spec` (``RegimeSpec``, ``RegimeFlag``, ``register_regime``),
  :mod:`.registry` (discovers every ``regimes/<name>/spec.py`` and the ``MUTUALRL_REGIMES`` plugins; looks regimes
  up; docs/architecture.md), :mod:`.pooled_spec` (the settings of the peer rows PRP and HACPO pool),
  :mod:`.rescue_spec` (the settings of SGT's rescue, which opd-sgt and byte-kd share), :mod:`.loss_types` (TRL's
  loss types classified once).
- SGT's rescue, one implementation for every regime that uses it: :mod:`.rescue`; the success anchor:
  :mod:`.success_anchor`.
- Shared maths: :mod:`.grpo` (GRPO advantages, TRL-exact, Sec. "Preliminaries", and the same over a pool of
  policies), :mod:`.pool` (the ``[P, K]`` / ``[P, M, K]`` layout), :mod:`.importance` (the
  importance-ratio diagnostics and ESS of rows a learner did not sample), :mod:`.word_units` (cross-policy
  quantities per token where the tokenizations match, per word where they differ), :mod:`.rank_metrics` (the metric types a
  regime returns, by how each is reduced over the ranks).
- Shared by the adapters: :mod:`.trainer_interface` (what the trainer hands a regime: ``GRPOBatch``, the step object
  ``StepRollouts``, ``TrainerView``), :mod:`.adapter` (the base adapter), :mod:`.peers` (peer tables as
  ``[P, M-1, K]`` tensors), :mod:`.peer_responses` (peer responses as learner token rows), :mod:`.batch_rows`
  (batch surgery: rows appended to TRL's batch, auxiliary sequences), :mod:`.pooled_rows` (the peer rows PRP and
  HACPO pool); a peer round is one call of the SEE (:func:`mutualrl.see.rounds.next_round`).
- The trainer's side, which no regime imports: :mod:`.publication` (this rank's records for the SEE, from TRL's
  batch) and :mod:`.quantile_sketch` (what a rank sends over for a quantile metric; the reduction over the ranks is
  ``training/trl_metrics.py``'s).
"""

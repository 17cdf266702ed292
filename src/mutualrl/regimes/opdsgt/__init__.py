"""opd-sgt, on-policy distillation with a rescue (beyond the paper): ``spec`` (settings, metrics; torch-free),
``maths`` (teacher weights, rescue gate and choice, per-token signal, rescue NLL), ``adapter`` (judging the peers,
their judgements and the rescues onto TRL's batch, the rescue loss)."""

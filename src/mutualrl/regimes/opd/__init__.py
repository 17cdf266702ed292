"""OPD, mutual on-policy distillation across tokenizers (beyond the paper): ``spec`` (settings, metrics;
torch-free), ``maths`` (gate, teacher weights, per-token signal and advantages), ``adapter`` (judging the peers,
their judgements onto TRL's batch)."""

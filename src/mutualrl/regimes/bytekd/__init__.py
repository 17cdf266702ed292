"""byte-kd, on-policy distillation of the peers' next-byte distributions (beyond the paper): ``spec`` (settings,
metrics; torch-free), ``maths`` (the divergence over next-byte symbols, the shared boundaries), ``adapter`` (the
judges' distributions onto TRL's batch, the loss term)."""

"""PRP, Peer Rollout Pooling (paper Sec. "Regime 1"): ``spec`` (settings, metrics; torch-free),
``maths`` (pooled advantages, behaviour log-probs, ratio statistics), ``adapter`` (TRL batch)."""

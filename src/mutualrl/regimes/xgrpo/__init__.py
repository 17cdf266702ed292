"""XGRPO, cross-policy GRPO advantage sharing (paper Sec. "Regime 2"): ``spec`` (settings, metrics;
torch-free), ``maths`` (pooled advantages and their diagnostics), ``adapter`` (TRL batch)."""

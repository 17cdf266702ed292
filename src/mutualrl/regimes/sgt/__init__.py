"""SGT, Success-Gated Transfer (paper Sec. "Regime 3"): ``spec`` (settings, metrics; torch-free),
``maths`` (gate, selection, weights, NLL, metrics), ``adapter`` (TRL batch and the extra loss)."""

"""Standalone GRPO (paper Sec. "Preliminaries"): ``spec`` only. Its maths is TRL's own
(:mod:`mutualrl.regimes.core.grpo` reproduces it) and its adapter the base one, which adds nothing."""

"""The sharing regimes (paper Sec. "Three Controlled Probes"): pure functions over tensors."""

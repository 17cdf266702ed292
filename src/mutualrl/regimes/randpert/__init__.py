"""GRPO + random baseline perturbation, the paper's control (App. "Ablation: shared normalization for
XGRPO"): ``spec`` (settings; torch-free), ``maths`` (perturbed advantages), ``adapter`` (TRL batch)."""

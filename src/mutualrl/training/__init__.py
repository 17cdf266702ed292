"""The per-policy worker and the TRL GRPOTrainer subclass that talks to the SEE."""

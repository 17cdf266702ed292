"""THL: the Tokenizer Heterogeneity Layer (paper Sec. "Tokenizer Heterogeneity Layer")."""

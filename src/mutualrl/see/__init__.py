"""SEE: the Shared Experience Exchange (paper Sec. "The Mutual RL System Design")."""

"""Greedy evaluation, complementarity analysis and run plots."""

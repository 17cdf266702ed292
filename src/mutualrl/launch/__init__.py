"""MWRA placement and the per-policy process launcher."""

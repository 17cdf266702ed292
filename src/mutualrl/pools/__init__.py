"""Builtin pools: the embedded tiny pool and the offline smol pool."""

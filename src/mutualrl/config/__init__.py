"""Run configuration: typed dataclasses loaded from YAML recipes (see :mod:`.schema`)."""

from mutualrl.config.loader import (
    LoadedRecipe,
    list_pool_recipes,
    load_run_config,
    recipes_dir,
    resolve_recipe,
)
from mutualrl.config.schema import (
    REGIME_NAMES,
    LaunchConfig,
    PolicyConfig,
    PoolConfig,
    PRPSettings,
    RandPertSettings,
    RegimeConfig,
    RunConfig,
    SEESettings,
    SGTSettings,
    TaskConfig,
    ValidationConfig,
    XGRPOSettings,
)
from mutualrl.config.typed import ConfigError

__all__ = [
    "REGIME_NAMES",
    "ConfigError",
    "LaunchConfig",
    "LoadedRecipe",
    "PolicyConfig",
    "PoolConfig",
    "PRPSettings",
    "RandPertSettings",
    "RegimeConfig",
    "RunConfig",
    "SEESettings",
    "SGTSettings",
    "TaskConfig",
    "ValidationConfig",
    "XGRPOSettings",
    "list_pool_recipes",
    "load_run_config",
    "recipes_dir",
    "resolve_recipe",
]

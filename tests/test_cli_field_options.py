"""The ``mutualrl train`` options that set one settings field take their help and bound from the field's declaration.

A field declares its option (``flag`` in :func:`mutualrl.config.field_rules.rules`); the CLI's help, the lower bound
and the key the launcher sets are derived from it, so the option and the recipe key cannot describe the setting
differently. A regime's own option without a help of its own shows its settings field's.
"""

from __future__ import annotations

import dataclasses

import typer

from mutualrl.cli.main import app
from mutualrl.config.field_table import flag_fields, option_help
from mutualrl.launch.run import TrainOptions, option_settings
from mutualrl.regimes.core.registry import regime_flags


def train_options() -> dict[str, typer.core.TyperOption]:
    command = typer.main.get_command(app).commands["train"]
    return {name: param for param in command.params for name in param.opts}


def test_each_field_option_shows_its_fields_help_and_bound():
    declared, shown = flag_fields(), train_options()
    assert {"--gpus", "--nodes", "--force"} <= set(declared)  # the walk finds the declarations
    for flag, field in declared.items():
        param = shown[flag]
        assert param.help == option_help(field.help, field.key), flag
        assert param.help.startswith(field.help) and param.help.endswith(f"Recipe key: {field.key}.")
        if "ge" in field.bounds:
            assert param.min == field.bounds["ge"], flag


def test_no_fields_help_names_its_own_option():
    """The settings page lists the option beside the key; a help that names it too reads it twice on --help."""
    assert [flag for flag, field in flag_fields().items() if flag in field.help] == []


def test_each_field_option_sets_the_field_that_declares_it():
    given = {flag: f"value of {flag}" for flag in flag_fields()}
    options = TrainOptions(**{flag.removeprefix("--").replace("-", "_"): value for flag, value in given.items()})
    set_by = {s.flag: (s.key, s.value) for s in option_settings(options)}
    assert set_by == {flag: (field.key, given[flag]) for flag, field in flag_fields().items()}


def test_a_field_option_not_given_leaves_the_recipes_value():
    assert option_settings(TrainOptions()) == []


def test_a_regime_option_without_help_of_its_own_shows_its_settings_fields():
    shown = train_options()
    derived = [(spec, flag) for spec, flag in regime_flags() if not flag.help]
    assert [flag.flag for _, flag in derived] == ["--prp-denominator"]
    for spec, flag in derived:
        field = next(f for f in dataclasses.fields(spec.settings) if f.name == flag.setting)
        key = f"regime.{spec.settings_key}.{flag.setting}"
        assert shown[flag.flag].help == f"{spec.name.upper()} only: " + option_help(field.metadata["help"], key)

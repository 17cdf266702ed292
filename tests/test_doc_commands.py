"""Every ``mutualrl`` command line of the docs' ``bash`` blocks parses as the CLI would parse it, and every ``train``
or ``sweep`` line's recipe, regime and ``--set`` settings resolve as the launcher resolves them.

The README's own commands are run (tests/test_readme_tour.py, tests/test_readme_byo.py) and parsed
(tests/test_readme_commands.py); the docs' are mostly for machines this suite does not have (GPUs, Slurm, the hub),
so here they are checked without running: a renamed subcommand or option, a misspelt setting (``--set
grpo.learning_ratee=...``: "not a field of trl.GRPOConfig; did you mean 'learning_rate'?"), a recipe or regime that
no longer exists fails here, in process, in well under a second a line.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from test_readme_tour import parsed_command

from e2e_helpers import ROOT
from mutualrl.config.loader import load_run_config

DOCS = sorted((ROOT / "docs").glob("*.md"))
RECIPES = {path.stem for folder in ("pools", "experiments") for path in (ROOT / "recipes" / folder).glob("*.yaml")}


def doc_commands(text: str) -> list[str]:
    """The ``mutualrl`` commands of a Markdown text's ``bash`` blocks: a trailing ``\\`` joins lines, a line is cut at
    ``;`` and ``&&`` (so ``for ...; do mutualrl ...; done`` gives its command), ``do`` / ``then`` before a command and
    a ``.venv/bin/`` prefix are dropped. Commands inside another program's quotes (``srun bash -c '...'``) are that
    program's, not a line of their own."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in re.sub(r"\s*\\\n\s*", " ", block).splitlines():
            if line.lstrip().startswith("#"):
                continue
            for part in shell_parts(line):
                words = re.sub(r"^(do|then)\s+", "", part.strip()).removeprefix(".venv/bin/")
                if words.startswith("mutualrl "):
                    commands.append(words)
    return commands


def shell_parts(line: str) -> list[str]:
    """A shell line cut at ``;`` and ``&&`` outside quotes (``--device-map 'a=0;b=1'`` stays whole)."""
    parts, current, quote = [], "", None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == ";" or (char == "&" and line[index:index + 2] == "&&"):
            parts.append(current)
            current = ""
            continue
        elif char == "&" and line[index - 1:index + 1] == "&&":
            continue
        current += char
    return [*parts, current]


def all_doc_commands() -> list[tuple[str, str]]:
    return [(path.name, line) for path in DOCS for line in doc_commands(path.read_text())]


def command_id(item: tuple[str, str]) -> str:
    name, line = item
    return f"{name}: {shlex.join(shlex.split(line, comments=True)[1:4])}"


def test_commands_are_found_in_every_kind_of_line():
    text = ("```bash\n.venv/bin/mutualrl a \\\n  --b 1  # c\n# mutualrl commented\n"
            "for r in x y; do mutualrl train --regime $r; done\nsrun bash -c 'exec mutualrl train'\n```\n"
            "```\nmutualrl not-bash\n```\n")
    assert doc_commands(text) == ["mutualrl a --b 1  # c", "mutualrl train --regime $r"]
    assert shell_parts("a 'x;y' && b; c") == ["a 'x;y' ", " b", " c"]
    found = [line for _, line in all_doc_commands()]
    for subcommand in ("train", "eval", "complementarity", "plot", "sweep", "report", "see inspect", "thl-check",
                       "distill", "assets fetch"):
        assert any(line.startswith(f"mutualrl {subcommand} ") for line in found), subcommand


@pytest.mark.parametrize("item", all_doc_commands(), ids=command_id)
def test_each_doc_command_parses(item):
    """The subcommand and every option the line names exist, with values of the right type."""
    parsed_command(shlex.split(item[1], comments=True)[1:])


def resolvable(line: str) -> tuple[str, list[str | None], list[str], int | None] | None:
    """``(recipe, regimes, --set values, --max-steps)`` of a ``train`` or ``sweep`` line whose settings can be resolved
    here: a shipped recipe (or the default, ``tiny``), no shell variable, not a ``--resume`` (which reads a run
    folder's own config); else None."""
    argv = shlex.split(line, comments=True)[1:]
    if argv[0] not in ("train", "sweep") or "$" in line:
        return None
    params = parsed_command(argv).params
    if params.get("resume"):
        return None
    recipe = params.get("pool") or "tiny"
    if recipe not in RECIPES:
        return None
    if argv[0] == "sweep":
        regimes: list[str | None] = (params.get("regimes") or "").split(",") or [None]
    else:
        regimes = [params.get("regime")]
    return recipe, regimes, list(params.get("overrides") or ()), params.get("max_steps")


@pytest.mark.parametrize("item", [item for item in all_doc_commands() if resolvable(item[1])], ids=command_id)
def test_each_doc_train_line_resolves(item):
    """The recipe, the regime and every ``--set`` of the line make a valid configuration (validated as the launcher
    validates a recipe, TRL's fields included); the line's user modules are not imported here."""
    recipe, regimes, overrides, max_steps = resolvable(item[1])
    for regime in regimes:
        load_run_config(recipe, overrides, regime=regime or None, max_steps=max_steps)


def test_a_misspelt_setting_would_fail():
    with pytest.raises(Exception, match="did you mean 'learning_rate'"):
        load_run_config("tiny", ["grpo.learning_ratee=2e-6"])
    assert resolvable("mutualrl train --pool 2qwen --set a.b=1 --max-steps 3") == ("2qwen", [None], ["a.b=1"], 3)
    assert resolvable("mutualrl train --pool $pool") is None
    assert resolvable("mutualrl train --resume -o runs/x") is None


def test_every_doc_has_its_commands_in_bash_blocks():
    """A command block of the docs that shows ``mutualrl`` lines is marked ``bash``, so the tests above read it (a
    drawing, with its box characters, is not a command block)."""
    unmarked = [f"{path.name}: {block.splitlines()[0]}" for path in DOCS
                for block in re.findall(r"```\n(.*?)```", path.read_text(), re.S)
                if any(line.strip().startswith("mutualrl ") for line in block.splitlines()) and "│" not in block]
    assert unmarked == [], unmarked


def test_docs_are_reference_size():
    """docs/ is reference a user reads to do something: under 25,000 words in all (history: benchmarks/results/,
    CHANGELOG.md). A generated page (docs/settings.md, from the schema's help strings) is counted with the code it is
    made from, not here: it grows with the settings, and tests/test_settings_page.py keeps it true."""
    from mutualrl.config.settings_page import GENERATED

    words = sum(len(path.read_text().split()) for path in DOCS if not path.read_text().startswith(GENERATED))
    assert words < 25_000, f"docs/ holds {words} words"
    assert Path(ROOT / "benchmarks" / "README.md").read_text().count("](results/") >= 20

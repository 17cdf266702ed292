"""Every ``mutualrl`` line of every shell block in README.md names a subcommand and options the CLI has.

The tour and "Your own data" are also run as written (tests/test_readme_tour.py, tests/test_readme_byo.py); this
parses the rest too (the sweep, its table and figure), so a renamed option fails here before a user meets it.
"""

from __future__ import annotations

import re
import shlex

import pytest
from test_readme_tour import parsed_command

from e2e_helpers import ROOT


def readme_commands(readme: str) -> list[str]:
    """The ``mutualrl`` command lines of the README's ``bash`` blocks, a trailing ``\\`` joining lines; the
    ``.venv/bin/`` prefix of the set-up's lines dropped."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", readme, re.S):
        for line in re.sub(r"\s*\\\n\s*", " ", block).splitlines():
            words = line.strip().removeprefix(".venv/bin/")
            if words.startswith("mutualrl "):
                lines.append(words)
    return lines


def test_the_commands_are_found_in_every_block():
    lines = readme_commands((ROOT / "README.md").read_text())
    assert any(line.startswith("mutualrl sweep ") for line in lines), lines
    assert any(line.startswith("mutualrl report ") for line in lines), lines
    assert readme_commands("```bash\n.venv/bin/mutualrl a \\\n  --b 1  # c\n# d\npip x\n```\n") == ["mutualrl a --b 1  # c"]


@pytest.mark.parametrize("line", readme_commands((ROOT / "README.md").read_text()),
                         ids=lambda line: shlex.join(shlex.split(line, comments=True)[1:3]))
def test_each_readme_command_parses(line):
    parsed_command(shlex.split(line, comments=True)[1:])

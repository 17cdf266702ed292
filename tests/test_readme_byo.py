"""README.md's "Your own data and reward function" runs as written (issue 39): its two files, its shell lines and
its Python block, in one fresh folder outside the repository. As in tests/test_readme_tour.py only the length
of training differs from a user's run (the ``tiny`` recipe cut to 2 steps through ``MUTUALRL_RECIPES``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from test_readme_tour import run_as_written, short_recipes, write_shim

from e2e_helpers import ROOT, child_env

HEADING = "## Your own data and reward function"


def section() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index(HEADING)
    return readme[start:readme.index("\n## ", start + 1)]


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", section(), re.S)


def test_the_section_has_the_files_the_commands_and_the_python():
    python, text, shell = blocks("python"), blocks("text"), blocks("bash")
    assert len(python) == 2 and python[0].startswith("# my_rewards.py") and "mutualrl.train(" in python[1]
    assert len(text) == 1 and text[0].startswith("# data/train.jsonl") and len(shell) == 1


@pytest.mark.slow
@pytest.mark.user_start
def test_the_section_runs_as_written(tmp_path):
    rewards, script = blocks("python")
    (tmp_path / "my_rewards.py").write_text(rewards)
    data = tmp_path / "data"
    data.mkdir()
    example = json.loads(blocks("text")[0].splitlines()[1])
    assert set(example) == {"prompt", "answer"}
    rows = [{"prompt": f"{a}+{b}=", "answer": a + b} for a in range(8) for b in range(6)]  # like the example row
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_shim(tmp_path / "bin" / "mutualrl")
    env = child_env()
    # my_rewards.py is found from the working directory, as for a user (no PYTHONPATH of theirs); the workers start
    # as a user's do, each its own interpreter (user_start: no zygote)
    env.update(PATH=f"{tmp_path / 'bin'}:{env.get('PATH', '')}",
               MUTUALRL_RECIPES=str(short_recipes(tmp_path / "recipes")))
    run_as_written([x for x in blocks("bash")[0].splitlines() if x.strip() and not x.startswith("#")], tmp_path, env,
                   "README")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"README's Python block failed\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    held_out = done.stdout.strip().splitlines()[-1]
    assert "tiny-bpe" in held_out and "tiny-sp" in held_out, held_out
    for run in ("mine", "mine-api"):
        summary = json.loads((tmp_path / "runs" / run / "summary.json").read_text())
        assert set(summary["policies"]) == {"tiny-bpe", "tiny-sp"}

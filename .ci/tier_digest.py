"""The digest of what the benchmarks-and-recipes test tier checks, against the one recorded when it last passed.

The tier (pytest marker ``benchmarks_and_recipes``: the benchmark scripts' smoke tests and every-recipe matrices
beyond one recipe per code path) is left out of the README's test command. ``.ci/run`` runs it when this digest
differs from the committed ``.ci/benchmarks-and-recipes.sha256`` (or always with ``--full``), and records the new
digest when it passes. No network, no git: the digest covers the files as they are in the working tree.

    python .ci/tier_digest.py            # print the digest of the tree
    python .ci/tier_digest.py --check    # exit 0 when it equals the recorded one, 1 when the tier must run
    python .ci/tier_digest.py --write    # record it (after the tier passed)
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / ".ci" / "benchmarks-and-recipes.sha256"
MARKERS = ("benchmarks_and_recipes", "recipe_params")
"""What a test file of the tier holds: the marker, or the helper that marks a matrix's other recipes
(``tests/recipe_paths.py``)."""


def covered_files() -> list[Path]:
    """The benchmark scripts (not their results or prose), every recipe, and the tests of the tier with their
    helpers."""
    scripts = [p for p in (ROOT / "benchmarks").rglob("*") if p.is_file() and "results" not in
               p.relative_to(ROOT / "benchmarks").parts and p.suffix != ".md" and "__pycache__" not in p.parts]
    recipes = [p for p in (ROOT / "recipes").rglob("*") if p.is_file()]
    tests = [p for p in (ROOT / "tests").glob("*.py")
             if any(marker in p.read_text(encoding="utf-8", errors="replace") for marker in MARKERS)]
    return sorted({*scripts, *recipes, *tests, ROOT / "tests" / "bench_helpers.py", ROOT / "pyproject.toml"})


def digest() -> str:
    """sha256 over each covered file's path and bytes, in path order."""
    total = hashlib.sha256()
    for path in covered_files():
        total.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return total.hexdigest()


def main(argv: list[str]) -> int:
    now = digest()
    if argv == ["--write"]:
        RECORDED.write_text(now + "\n")
        return 0
    if argv == ["--check"]:
        recorded = RECORDED.read_text().strip() if RECORDED.is_file() else ""
        return 0 if recorded == now else 1
    if not argv:
        print(now)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

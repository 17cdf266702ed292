"""What a regime author reads outside the regime's folder: the lines of the mutualrl modules a regime folder imports.

For each folder ``src/mutualrl/regimes/<name>/`` (a regime: it has a ``spec.py``) the script collects every
``import mutualrl...`` / ``from mutualrl... import`` in its files, top-level and inside functions alike, resolves each
to a module file of ``src/mutualrl`` (a name imported from a package is its module when there is one, else the
package's ``__init__.py``), drops the folder's own files, and counts each module once: its lines (``wc -l``). Only
the modules imported directly: what those import in turn is the seam's business, not the regime's.

Usage: ``python benchmarks/regime_imports.py [REV ...]`` (default: the working tree; ``worktree`` names it), one JSON
line per revision: per regime the modules and their lines, and the largest.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "mutualrl"


def sources(rev: str | None) -> dict[str, str]:
    """``path under src/mutualrl`` -> text, of the working tree (``rev`` None) or a revision."""
    if rev is None:
        base = ROOT / "src" / PKG
        return {str(p.relative_to(base)): p.read_text() for p in base.rglob("*.py")}
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, f"src/{PKG}"], capture_output=True, check=True)
    out = {}
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(".py"):
                out[member.name.removeprefix(f"src/{PKG}/")] = tar.extractfile(member).read().decode()
    return out


def module_file(dotted: str, files: dict[str, str]) -> str | None:
    """The file of module ``mutualrl.a.b`` (``a/b.py`` or ``a/b/__init__.py``), None if neither exists."""
    parts = dotted.split(".")[1:]
    for candidate in ("/".join(parts) + ".py", "/".join([*parts, "__init__.py"])):
        if candidate in files:
            return candidate
    return None


def imported_files(text: str, files: dict[str, str]) -> set[str]:
    """The module files of ``src/mutualrl`` that ``text`` imports (a name from a package: its module if it is one)."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == PKG:
            for alias in node.names:
                target = module_file(f"{node.module}.{alias.name}", files) or module_file(node.module, files)
                if target:
                    found.add(target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PKG and (target := module_file(alias.name, files)):
                    found.add(target)
    return found


def measure(rev: str | None) -> dict:
    files = sources(rev)
    folders = sorted({Path(rel).parts[1] for rel in files
                      if rel.startswith("regimes/") and rel.endswith("/spec.py") and len(Path(rel).parts) == 3})
    regimes = {}
    for folder in folders:
        own = {rel for rel in files if rel.startswith(f"regimes/{folder}/")}
        outside = set().union(*(imported_files(files[rel], files) for rel in own)) - own
        lines = {rel: files[rel].count("\n") for rel in sorted(outside)}
        regimes[folder] = {"modules": len(lines), "lines": sum(lines.values()), "by_module": lines}
    return {"rev": rev or "working tree", "regimes": regimes,
            "largest": max(regimes, key=lambda name: regimes[name]["lines"]) if regimes else None}


def main(argv: list[str]) -> None:
    for rev in argv or ["worktree"]:
        print(json.dumps(measure(None if rev in ("", "-", "worktree") else rev)))


if __name__ == "__main__":
    main(sys.argv[1:])

"""The layout is the architecture: imports only go down the layers (docs/architecture.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "mutualrl"

#: Layer of each top-level package or module; a module may import only from its own layer or below.
LAYERS = {
    "__init__": 0, "errors": 0, "fault_injection": 0, "atomic_io": 0, "padding": 0, "host": 0, "run_folder": 0,
    "versions": 0, "release": 0, "inputs_record_reader": 0, "output_guards": 0, "metric_labels": 0, "write_failures": 0,
    "trust": 0,
    "assets": 1, "config": 1, "see": 1, "thl": 1, "regimes": 1,
    "tasks": 2,
    "pools": 3,
    "evaluation": 4, "ops": 4,
    "training": 5,
    "launch": 6, "doctor": 6,
    "cli": 7, "__main__": 7, "api": 7,
}


def imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mutualrl":
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.split(".")[0] == "mutualrl"]
        for name in names:
            parts = name.split(".")
            found.add(parts[1] if len(parts) > 1 else "__init__")
    return found


def package_of(path: Path) -> str:
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def test_every_package_has_a_layer():
    packages = {package_of(p) for p in SRC.rglob("*.py")}
    assert packages <= set(LAYERS), f"give these a layer in LAYERS and docs/architecture.md: {packages - set(LAYERS)}"


def test_imports_only_go_down_the_layers():
    upward = []
    for path in sorted(SRC.rglob("*.py")):
        own = package_of(path)
        for target in imported_packages(path):
            if LAYERS.get(target, 99) > LAYERS.get(own, -1):
                upward.append(f"{path.relative_to(SRC)} ({own}, layer {LAYERS.get(own)}) imports {target} "
                              f"(layer {LAYERS.get(target)})")
    assert upward == []


def cli_imports(path: Path) -> list[str]:
    """The imports of ``mutualrl.cli`` (or a module in it) in ``path``, top level or in a function, or its name as a
    string (a module reached through ``sys.modules`` or ``importlib``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            named = [node.module] + [f"{node.module}.{a.name}" for a in node.names if node.module == "mutualrl"]
        elif isinstance(node, ast.Import):
            named = [a.name for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"[\w.]+", node.value):
            named = [node.value]  # a module reached by name: sys.modules.get("mutualrl.cli.common"), import_module
        else:
            continue
        found += [name for name in named if name == "mutualrl.cli" or name.startswith("mutualrl.cli.")]
    return found


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_nothing_but_the_cli_imports_the_cli():
    """The command line is the top: no package below it imports ``mutualrl.cli``, nor does ``api.py`` beside it (what
    a command and the Python API both run lives below them, e.g. ``launch/evaluate.py`` for ``eval``)."""
    wrong = [f"{path.relative_to(SRC)} imports {module}" for path in sorted(SRC.rglob("*.py"))
             if package_of(path) not in ("cli", "__main__") for module in cli_imports(path)]
    assert wrong == []


def test_the_cli_import_check_sees_one(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from mutualrl import cli\ndef f():\n    from mutualrl.cli.eval_cmd import x\n"
                      "import mutualrl.cli.common\nfrom mutualrl.launch import evaluate\n"
                      "console = sys.modules.get('mutualrl.cli.run_cmd')\n")
    assert sorted(cli_imports(module)) == ["mutualrl.cli", "mutualrl.cli.common", "mutualrl.cli.eval_cmd",
                                           "mutualrl.cli.run_cmd"]


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_no_two_packages_of_a_layer_import_each_other():
    """Inside a layer arrows run one way too: in layer 1 config -> regimes (the registry) and regimes -> see, thl
    (a regime's adapter publishes and reads SEE records, retokenizes with THL); never back."""
    arrows = {(package_of(path), target) for path in SRC.rglob("*.py") for target in imported_packages(path)
              if target != package_of(path)}
    assert sorted(f"{a} <-> {b}" for a, b in arrows if (b, a) in arrows and a < b) == []


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The project modules ``path`` imports, at the top or inside a function (``from pkg import mod`` names mod)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mutualrl":
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                      for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
    return found & modules


def import_cycles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or round a circle (strongly connected, size > 1)."""
    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for target in arrows.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    reached = {module: reach(module) for module in arrows}
    groups = {frozenset(m for m in reached[module] if module in reached[m]) for module in arrows if module in reached[module]}
    return sorted(sorted(group) for group in groups)


def test_no_module_imports_itself_round_a_circle():
    """Inside a package too (launch/ most of all): a circle of modules is one room split in two."""
    paths = {module_name(p): p for p in SRC.rglob("*.py")}
    arrows = {module: imported_modules(path, set(paths)) - {module} for module, path in paths.items()}
    assert import_cycles(arrows) == []


#: The rooms of launch/ and the rooms each may import (docs/architecture.md): plan is pure and rundir only touches
#: the run folder, so neither imports another room; supervise runs what plan made, in the folder rundir keeps.
LAUNCH_ROOMS = {"plan": set(), "rundir": set(), "supervise": {"plan", "rundir"}}


def test_the_rooms_of_launch_import_only_what_they_may():
    launch = SRC / "launch"
    wrong = []
    for room, allowed in LAUNCH_ROOMS.items():
        for path in sorted((launch / room).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                module = node.module if isinstance(node, ast.ImportFrom) and node.module else ""
                parts = module.split(".")
                if parts[:2] == ["mutualrl", "launch"] and (len(parts) < 3 or parts[2] not in allowed | {room}):
                    wrong.append(f"{path.relative_to(SRC)} imports {module}")
    assert wrong == []


def test_the_cycle_finder_sees_a_circle():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_checker_sees_an_upward_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from mutualrl.launch.plan.launch_plan import LaunchPlan\nimport mutualrl.training.worker\n")
    assert imported_packages(module) == {"launch", "training"}


#: The hard limit; 450 lines is the guideline a cohesive module may pass (docs/architecture.md, "Layers").
MAX_LINES = 600


def test_no_source_file_is_over_the_line_limit():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these along their seams (docs/architecture.md): {long}"


#: Issue 28 (launch/), issue 41 (all of src/): no function longer than this (``def`` line to last line,
#: decorators excluded).
MAX_FUNCTION_LINES = 80


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``{"file.py:name": lines}`` for every function (methods and nested ones too) under ``root`` over ``limit``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if (lines := node.end_lineno - node.lineno + 1) > limit:
                    found[f"{path.relative_to(root)}:{node.name}"] = lines
    return found


def test_no_function_in_src_is_over_the_line_limit():
    assert long_functions(SRC) == {}, "split these along their seams (docs/architecture.md)"


def test_the_function_length_check_sees_a_long_function(tmp_path):
    def method(body_lines: int) -> str:
        return "class C:\n    def m(self):\n" + "".join(f"        x{i} = {i}\n" for i in range(body_lines))

    (tmp_path / "m.py").write_text(method(MAX_FUNCTION_LINES - 1))  # def line + 79 = exactly the limit
    assert long_functions(tmp_path) == {}
    (tmp_path / "m.py").write_text(method(MAX_FUNCTION_LINES))
    assert long_functions(tmp_path) == {"m.py:m": MAX_FUNCTION_LINES + 1}


#: What a regime folder ``regimes/<name>/`` may import from mutualrl besides its own files (issue 69).
REGIME_API = "mutualrl.regimes.api"


def mutualrl_imports(path: Path) -> list[str]:
    """The mutualrl modules ``path`` imports, top level or in a function, as written (``from m import x`` names m)."""
    modules = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.append(node.module)
        elif isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
    return [module for module in modules if module.split(".")[0] == "mutualrl"]


def regime_folder_imports(folder: Path) -> list[str]:
    """``"file.py imports module"`` for each mutualrl import in ``folder`` that is neither the folder's own nor the
    regime API."""
    own = f"mutualrl.regimes.{folder.name}"
    return [f"{path.relative_to(folder.parent)} imports {module}" for path in sorted(folder.rglob("*.py"))
            for module in mutualrl_imports(path)
            if module not in (REGIME_API, own) and not module.startswith(f"{own}.")]


def regime_folders() -> list[Path]:
    return sorted(path.parent for path in (SRC / "regimes").glob("*/spec.py"))


def test_a_regime_folder_imports_only_itself_and_the_regime_api():
    """Every folder the registry finds (``builtin_spec_modules``: a folder with a ``spec.py``), whatever they are."""
    from mutualrl.regimes.core.registry import builtin_spec_modules

    assert [f"mutualrl.regimes.{folder.name}.spec" for folder in regime_folders()] == sorted(builtin_spec_modules())
    assert "sgt" in [folder.name for folder in regime_folders()]  # the walk finds the folders at all
    assert [line for folder in regime_folders() for line in regime_folder_imports(folder)] == []


def test_the_regime_core_imports_no_regime_folder():
    """The arrows run regime folder -> API -> core, never from the core back up into a regime."""
    folders = [f"mutualrl.regimes.{folder.name}" for folder in regime_folders()]
    core = SRC / "regimes" / "core"
    assert [f"{path.relative_to(SRC)} imports {module}" for path in sorted(core.rglob("*.py"))
            for module in mutualrl_imports(path) if f"{module}.".startswith(tuple(f"{f}." for f in folders))] == []


def test_the_regime_import_check_sees_another_module(tmp_path):
    folder = tmp_path / "myreg"
    folder.mkdir()
    (folder / "spec.py").write_text("from mutualrl.regimes.api import RegimeSpec\nfrom mutualrl.regimes.myreg import maths\n")
    (folder / "adapter.py").write_text("def f():\n    from mutualrl.regimes.core.grpo import group_advantages\n"
                                       "import mutualrl.errors\nfrom mutualrl.regimes.prp.maths import x\n")
    assert sorted(regime_folder_imports(folder)) == ["myreg/adapter.py imports mutualrl.errors",
                                                     "myreg/adapter.py imports mutualrl.regimes.core.grpo",
                                                     "myreg/adapter.py imports mutualrl.regimes.prp.maths"]

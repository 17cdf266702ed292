"""What a reader must follow along docs/architecture.md's two walks, measured on any revision.

Walk 1: one rollout from TRL's batch (policy A) to the target of its peer's SGT loss (policy B), lock-step, one
rank. From its entry points (the trainer's three hooks) the script follows every call it can resolve statically
inside src/mutualrl (a plain name, ``self.x`` up the class's bases, a module attribute, and the few attributes
:data:`BOUND` names: ``self.exchange`` is an ``ExperienceExchange``...), leaving out the paths walk 1 does not take
(:data:`OFF_WALK`: outside lock-step, vLLM, the first-step warnings). It counts

- ``files`` and ``functions`` reached and their ``lines`` (``def`` to last line);
- ``types``: the classes of src/ a reader meets on the way (named in a reached function's annotations or
  called there);
- ``representations``: the forms the payload takes, each anchored to the function that makes it
  (:data:`REPRESENTATIONS`); an anchor the walk does not reach stops the script, so the list is kept true.

Walk 2: ``mutualrl train --set grpo.learning_rate=v`` to TRL's ``GRPOConfig``: the files whose code takes the value
(or the mapping holding it) and hands it on, each anchored to a function (:data:`WALK2`), checked to exist.

Usage: ``python benchmarks/walks.py [--payload-only] [--regime NAME] [REV ...]`` (default: 3474d10 and the working
tree; ``worktree`` names the working tree), one JSON line per revision; ``--payload-only`` leaves out the calls on the
way that never touch the payload (:data:`SIDE_CONCERNS`: heartbeats, the log of rounds read, provenance, metrics);
``--regime prp`` (or ``hacpo``) walks the same step with that regime's adapter bound instead of SGT's (the PRP walk:
its peer rows into the learner's batch; the payload's forms are not checked there).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "mutualrl"

ENTRIES = (("training/trainer.py", "MutualGRPOTrainer._calculate_rewards"),  # the step object (since 2026-11-26)
           ("training/trainer.py", "MutualGRPOTrainer._generate_and_score_completions"),
           ("training/trainer.py", "MutualGRPOTrainer.compute_loss"))
BOUND = {  # attribute -> the class its value is on walk 1 (not visible to a static reader of the call)
    "self.regime": ("regimes/sgt/adapter.py", "SGTAdapter"),
    "self.exchange": ("see/exchange.py", "ExperienceExchange"),
    "self.consumption": ("see/lockstep.py", "LockStepConsumption"),
    "consumption": ("see/lockstep.py", "LockStepConsumption"),  # see.rounds.next_round's argument
    "consumption.exchange": ("see/exchange.py", "ExperienceExchange"),
    "self.trainer": ("training/trainer.py", "MutualGRPOTrainer"),
    "trainer": ("training/trainer.py", "MutualGRPOTrainer"),
    "batch": ("see/records.py", "RolloutBatch"),
}
OFF_WALK = ("regimes/offlock.py", "see/offlock/", "see/async_rounds/",  # the second name until 2026-11-27
            "_bounded_round", "training/catch_up.py", "training/vllm", "errors.py",
            "write_failures.py",  # a failed write as one error (in errors.py until 2026-11-26): an error path too
            "faults.py", "fault_injection.py",  # fault hooks (the first name until 2026-11-27): no-ops that never touch
            # the payload, like the errors raised on the way
            "SGTAdapter.warn_thresholds", "SGTAdapter.transform_stale", "RegimeAdapter.transform_stale",
            "RegimeAdapter.bind", "ExperienceExchange.__init__", "ExperienceExchange.__repr__")
SIDE_CONCERNS = (  # on walk 1 but never touching the payload: heartbeats, logs of rounds, provenance, metrics
    "see/liveness.py", "see/consumption_log.py", "see/provenance.py", "training/trl_metrics.py",
    "training/no_signal.py", "training/reward_signal_watch.py",  # the first name until 2026-11-27
    "rank_metrics.py", "quantile_sketch.py",  # of regimes/core/ (of regimes/ before issue 69)
    "RegimeAdapter.log_step", "RegimeAdapter.prune_records",
    "ExperienceExchange.heartbeat", "ExperienceExchange.prune", "LockStepConsumption.log_round")
REPRESENTATIONS = (  # the payload's forms on walk 1, in order, and where each is made
    ("TRL's batch tensors", "training/trainer.py", "MutualGRPOTrainer._generate_and_score_completions"),
    ("StepRollouts", "training/trainer.py", "MutualGRPOTrainer._collect_step_rollouts"),
    # numpy columns (Ragged: flat values + offsets) and the Arrow table over the same buffers, zero-copy: one form
    ("columnar record (RolloutBatch: Arrow over numpy)", "see/records.py", "RolloutBatch.__init__"),
    ("Arrow IPC bytes in a file", "see/exchange.py", "ExperienceExchange.publish"),
    # read back as the mapped table; spans and log-probs leave it as zero-copy numpy views (peer_row_views)
    ("memory-mapped Arrow table", "see/shards.py", "load_shard"),
    ("Python str and bool (the text the tokenizer takes)", "regimes/core/peer_responses.py", "peer_rows"),
    ("peer tensors [P, M-1, K]", "regimes/core/peers.py", "gather_peer_groups"),
    ("padded learner token rows", "padding.py", "pad_token_rows"),
)
BEFORE_RECORDS_MODULE = (  # the forms in the layout before see/records.py (2026-11-26), e.g. at 3474d10
    ("TRL's batch tensors", "training/trainer.py", "MutualGRPOTrainer._generate_and_score_completions"),
    ("StepRollouts", "training/trainer.py", "MutualGRPOTrainer._collect_step_rollouts"),
    ("Python lists of the record's columns", "regimes/core/adapter.py", "RegimeAdapter.build_records"),
    ("Arrow table (RolloutBatch)", "see/schema.py", "RolloutBatch.to_table"),
    ("Arrow IPC bytes in a file", "see/exchange.py", "ExperienceExchange.publish"),
    ("memory-mapped Arrow table", "see/shards.py", "load_shard"),
    ("Python lists (to_pylist)", "regimes/core/peers.py", "peer_rows"),
    ("peer tensors [P, M-1, K]", "regimes/core/peers.py", "gather_peer_groups"),
    ("padded learner token rows", "padding.py", "pad_token_rows"),
)


def representations(modules: dict[str, Module]) -> tuple[tuple[str, str, str], ...]:
    """The payload's forms as this revision's own code makes them (each layout anchored in its own functions)."""
    if not {"regimes/core/seam.py", "regimes/core/trainer_interface.py"} & set(modules):
        # before the shared regime modules moved into regimes/core/ (issue 69)
        return tuple((what, rel.replace("regimes/core/", "regimes/"), qual) for what, rel, qual in forms_of(modules))
    return forms_of(modules)


def forms_of(modules: dict[str, Module]) -> tuple[tuple[str, str, str], ...]:
    if "see/schema.py" in modules:
        return BEFORE_RECORDS_MODULE
    if not {"regimes/core/peer_responses.py", "regimes/peer_responses.py"} & set(modules):
        # before the peer responses left peers.py (2026-11-26)
        return tuple((what, "regimes/core/peers.py" if rel == "regimes/core/peer_responses.py" else rel, qual)
                     for what, rel, qual in REPRESENTATIONS)
    return REPRESENTATIONS


WALK2 = (  # walk 2's files, in order, each with the function that hands the value on
    ("cli/train_cmd.py", "train"), ("launch/run.py", "resolve_config"), ("config/loader.py", "parse_override"),
    ("config/yaml_strict.py", "load_yaml"), ("config/typed.py", "convert"), ("config/schema.py", None),
    ("config/validate.py", "check_grpo_fields"), ("launch/rundir/prepare.py", "prepare_launch"),
    ("launch/plan/launch_plan.py", "_policy_grpo"), ("training/grpo_args.py", "planned_grpo_text"),
    ("atomic_io.py", "write_text_atomic"), ("run_folder.py", "read_bytes"), ("training/worker.py", "run_policy"),
)


WALK2_BEFORE_ONE_MERGE = (  # walk 2 before the planning stages returned only their decisions (2026-11-26)
    ("cli/train_cmd.py", "train"), ("launch/run.py", "resolve_config"), ("config/loader.py", "parse_override"),
    ("config/yaml_strict.py", "load_yaml"), ("config/typed.py", "convert"), ("config/schema.py", None),
    ("config/validate.py", "check_grpo_fields"), ("launch/rundir/prepare.py", "prepare_run"),
    ("launch/plan/launch_plan.py", "_policy_grpo"), ("launch/plan/commands.py", "adapt_grpo_to_device"),
    ("launch/plan/batching.py", "apply_batch"), ("config/cadence.py", "apply_cadence"),
    ("training/grpo_args.py", "owned_grpo_fields"), ("training/trackers.py", "policy_run_name"),
    ("launch/plan/configs.py", "write_json"), ("atomic_io.py", "write_text_atomic"), ("run_folder.py", "read_json"),
    ("training/worker.py", "run_policy"),
)


def walk2_files(modules: dict[str, Module]) -> tuple[tuple[str, str | None], ...]:
    """Walk 2's files as this revision's code passes the value on."""
    merged = {"launch/plan/decided.py", "launch/plan/grpo_decisions.py"} & set(modules)
    return WALK2 if merged else WALK2_BEFORE_ONE_MERGE


LAZY_IMPORTS = "TORCH_NAMES"
"""A module-level ``{name: module}`` literal of names a module imports on first use (PEP 562)."""


class Module:
    """One file of src/mutualrl: its functions by qualified name, its classes' bases and its imported names."""

    def __init__(self, rel: str, text: str):
        self.rel, self.tree = rel, ast.parse(text)
        self.functions: dict[str, ast.AST] = {}
        self.classes: dict[str, list[str]] = {}
        self.imports: dict[str, tuple[str, str | None]] = {}  # local name -> (module file, name or None)
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = [ast.unparse(b).split(".")[-1] for b in node.bases]
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.functions[f"{node.name}.{item.name}"] = item
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == PKG:
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (node.module, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == PKG and alias.asname:
                        self.imports[alias.asname] = (alias.name, None)
        for node in self.tree.body:  # names a module imports on first use (regimes/api.py's): followed like imports
            if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [LAZY_IMPORTS]:
                self.imports |= {name: (module, name) for name, module in ast.literal_eval(node.value).items()}


def module_file(modules: dict[str, Module], dotted: str) -> str | None:
    path = dotted.removeprefix(PKG + ".").replace(".", "/")
    for candidate in (f"{path}.py", f"{path}/__init__.py"):
        if candidate in modules:
            return candidate
    return None


class Walker:
    def __init__(self, modules: dict[str, Module], off_walk: tuple[str, ...] = OFF_WALK):
        self.modules, self.off_walk = modules, off_walk
        self.class_files = {name: rel for rel, m in modules.items() for name in m.classes}
        self.reached: dict[tuple[str, str], ast.AST] = {}
        self.types: set[str] = set()

    def symbol(self, mod: Module, name: str) -> tuple[str, str] | None:
        """(file, qualified name) of ``name`` as ``mod`` sees it; a class stands for its ``__init__``."""
        if name in mod.functions or name in mod.classes:
            return mod.rel, name
        if name in mod.imports:
            target, attr = mod.imports[name]
            rel = module_file(self.modules, target if attr is None else target)
            if rel is None:  # ``from mutualrl.see import files``: a submodule
                rel = module_file(self.modules, f"{target}.{attr}")
                return (rel, "") if rel else None
            if attr is None:
                return rel, ""
            return self.symbol(self.modules[rel], attr) if attr in self.modules[rel].imports else (rel, attr)
        return None

    def method(self, rel: str, cls: str, name: str) -> tuple[str, str] | None:
        """``cls.name`` up the bases, as ``self.name`` finds it."""
        while cls:
            if rel not in self.modules:  # a BOUND class of another revision's layout
                rel = self.class_files.get(cls, "")
                if rel not in self.modules:
                    return None
            if f"{cls}.{name}" in self.modules[rel].functions:
                return rel, f"{cls}.{name}"
            bases = [b for b in self.modules[rel].classes.get(cls, []) if b in self.class_files]
            if not bases:
                return None
            cls = bases[0]
            rel = self.class_files[cls]
        return None

    def visit(self, rel: str, qual: str, context: tuple[str, str] | None = None) -> None:
        if any(part in rel or part == qual for part in self.off_walk) or (rel, qual) in self.reached:
            return
        mod = self.modules[rel]
        if qual in mod.classes:  # a class called: its __init__ (and the class is a type to hold)
            self.types.add(qual)
            found = self.method(rel, qual, "__init__")
            if found:
                self.visit(*found, context=(rel, qual))
            return
        node = mod.functions.get(qual)
        if node is None:
            return
        self.reached[(rel, qual)] = node
        owner = context or ((rel, qual.split(".")[0]) if "." in qual else None)
        self.note_types(mod, node)
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            self.follow(mod, call.func, owner)

    def follow(self, mod: Module, func: ast.AST, owner: tuple[str, str] | None) -> None:
        if isinstance(func, ast.Name):
            found = self.symbol(mod, func.id)
            if found and found[1]:
                self.visit(*found)
        elif isinstance(func, ast.Attribute):
            base = ast.unparse(func.value)
            if base == "self" and owner:
                found = self.method(owner[0], owner[1], func.attr)
                if found:
                    self.visit(*found, context=owner)
            elif base in BOUND:
                rel, cls = BOUND[base]
                found = self.method(rel, cls, func.attr)
                if found:
                    self.visit(*found, context=(rel, cls))
            elif isinstance(func.value, ast.Name):
                target = self.symbol(mod, func.value.id)
                if target and target[1] == "":  # a module's function
                    inner = self.modules[target[0]]
                    if func.attr in inner.functions or func.attr in inner.classes:
                        self.visit(target[0], func.attr)
                elif target and target[1] in self.modules[target[0]].classes:  # Class.method(...)
                    found = self.method(target[0], target[1], func.attr)
                    if found:
                        self.visit(*found, context=(target[0], target[1]))

    def note_types(self, mod: Module, node: ast.AST) -> None:
        annotations = [a.annotation for a in ast.walk(node) if isinstance(a, ast.arg) and a.annotation]
        annotations += [node.returns] if getattr(node, "returns", None) else []
        for annotation in annotations:
            for name in (n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)):
                if name in self.class_files:
                    self.types.add(name)


def sources(rev: str | None) -> dict[str, Module]:
    if rev is None:
        base = ROOT / "src" / PKG
        return {str(p.relative_to(base)): Module(str(p.relative_to(base)), p.read_text()) for p in base.rglob("*.py")}
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, f"src/{PKG}"], capture_output=True, check=True)
    out = {}
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(".py"):
                rel = member.name.removeprefix(f"src/{PKG}/")
                out[rel] = Module(rel, tar.extractfile(member).read().decode())
    return out


def bind_regime(modules: dict[str, Module], regime: str) -> None:
    """Walk 1 with ``regime``'s adapter as ``self.regime`` (the class of ``regimes/<regime>/adapter.py``)."""
    rel = f"regimes/{regime}/adapter.py"
    if rel not in modules:
        sys.exit(f"no {rel} in this revision")
    classes = [name for name in modules[rel].classes if name.endswith("Adapter")]
    BOUND["self.regime"] = (rel, classes[0])


def measure(rev: str | None, payload_only: bool = False, regime: str = "sgt") -> dict:
    """Both walks on ``rev`` (None: the working tree); ``payload_only`` leaves :data:`SIDE_CONCERNS` out of walk 1;
    ``regime``: whose adapter walk 1 binds (only SGT's walk checks the payload's forms)."""
    modules = sources(rev)
    bind_regime(modules, regime)
    walker = Walker(modules, OFF_WALK + SIDE_CONCERNS if payload_only else OFF_WALK)
    for rel, qual in ENTRIES:
        walker.visit(rel, qual)
    forms = representations(modules) if regime == "sgt" else ()
    missing = [(what, rel, qual) for what, rel, qual in forms if (rel, qual) not in walker.reached]
    if missing:
        sys.exit(f"{rev or 'working tree'}: walk 1 does not reach these anchors; update REPRESENTATIONS: {missing}")
    walk2 = walk2_files(modules)
    absent = [(rel, fn) for rel, fn in walk2 if rel not in modules or (fn and fn not in modules[rel].functions)]
    if absent:
        sys.exit(f"{rev or 'working tree'}: walk 2's anchors are gone; update WALK2: {absent}")
    files = sorted({rel for rel, _ in walker.reached})
    lines = sum(node.end_lineno - node.lineno + 1 for node in walker.reached.values())
    return {"rev": rev or "working tree", "payload_only": payload_only, "regime": regime,
            "walk1": {"representations": len(forms), "types": len(walker.types), "files": len(files),
                      "functions": len(walker.reached), "lines": lines, "type_names": sorted(walker.types),
                      "file_names": files},
            "walk2": {"files": len(walk2)}}


def main(argv: list[str]) -> None:
    payload_only = "--payload-only" in argv
    regime = argv[argv.index("--regime") + 1] if "--regime" in argv else "sgt"
    revs = [a for i, a in enumerate(argv) if a not in ("--payload-only", "--regime") and
            (i == 0 or argv[i - 1] != "--regime")]
    for rev in revs or ["3474d10", None]:
        print(json.dumps(measure(None if rev in ("", "-", "worktree") else rev, payload_only, regime)))


if __name__ == "__main__":
    main(sys.argv[1:])

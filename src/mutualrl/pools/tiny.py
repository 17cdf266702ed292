"""The embedded ``tiny`` pool: two small causal LMs with real, different tokenizers.

The first ``mutualrl train`` must show mutual RL working on a laptop with no GPU and no
model hub, so the pool is built here from configs and warm-started on the synthetic task
(:mod:`mutualrl.tasks.synthetic`):

- ``tiny-bpe``: a GPT-2-architecture model on the real GPT-2 byte-level BPE vocabulary,
  strong on ``add``, with a blind spot on ``sub``;
- ``tiny-sp``: a Llama-architecture model on the real Mistral SentencePiece vocabulary,
  strong on ``sub``, with a blind spot on ``add``.

A blind spot is a skill the model learnt and then stopped emitting (it answers ``?``):
its own rollouts on those prompts all fail, so GRPO alone gets no signal there, while the
peer's verified successes can bring the skill back (paper Sec. "Regime 3"). The recipe and
the reasons are in :mod:`mutualrl.pools.tiny_warm_start` and docs/pools.md.

Models are built once into the asset cache, ``$MUTUALRL_CACHE/models/<name>-<key>``,
where the key covers the warm-start recipe, the build environment and the torch and transformers
versions, so changing any of them rebuilds them; each build runs in a process of its own under
CPU-independent kernels (:data:`~mutualrl.pools.tiny_warm_start.BUILD_ENV`). The
folder holds ``save_pretrained`` model and tokenizer files and ``warm_start.json`` (the
recipe, held-out accuracy per family, timings).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from mutualrl.assets.cache import asset_lock, asset_path, building
from mutualrl.errors import AssetError
from mutualrl.host.allocator import allocator_env
from mutualrl.host.terminal import progress_console
from mutualrl.pools.tiny_warm_start import BUILD_ENV, WARM_START_FILE, ProgressFn, TinyModelSpec, build_key, warm_start

TINY_MODELS: dict[str, TinyModelSpec] = {
    s.name: s
    for s in (
        TinyModelSpec(
            name="tiny-bpe",
            tokenizer="gpt2",
            architecture="gpt2",
            strong_family="add",
            # 4 layers: with 2, the `sub` SGT brings back cost its `add` up to 0.045 under standalone's on the same
            # seed; width 96 built ~35 s slower and left its blind spot open or its `add` low
            # (benchmarks/results/learning-tiny.md, bpe-j to bpe-s).
            num_layers=4,
            description="GPT-2 architecture, 4x64 (2 heads), real GPT-2 byte-level BPE vocabulary; warm-started on "
            "synthetic-arith, strong on `add`, blind spot on `sub`",
        ),
        TinyModelSpec(
            name="tiny-sp",
            tokenizer="mistral-sp",
            architecture="llama",
            strong_family="sub",
            # 3 heads of 32 (hidden 96): with 2 (hidden 64) SGT's `add` answers broke its two-digit `sub` answers;
            # 4 (hidden 128) cost 2.5x the set-up's time. Batch 64 and 1,800 steps at 3e-3 learn both families
            # (0.90 / 0.96 held out); higher rates or fewer examples did not (docs/pools.md, "Why this design").
            hidden_size=96,
            num_heads=3,
            batch_size=64,
            steps=1800,
            blind_spot_steps=200,
            blind_spot_learning_rate=1e-3,  # closes `add` to its own samples: p(right answer) ~2e-7 (docs/pools.md)
            description="Llama architecture, 2x96 (3 heads), real Mistral SentencePiece vocabulary; warm-started on "
            "synthetic-arith, strong on `sub`, blind spot on `add`",
        ),
    )
}
TINY_NAMES = tuple(TINY_MODELS)


def tiny_model_dir(name: str) -> Path:
    """Cache folder of tiny model ``name`` for what determines its bytes (recipe, build environment, versions)."""
    spec = TINY_MODELS[name]
    return asset_path("models", f"{name}-{build_key(spec)}")


def is_tiny_model_cached(name: str) -> bool:
    return (tiny_model_dir(name) / WARM_START_FILE).is_file()


#: What a tiny model built before the cache recorded its files needs: the model, its tokenizer, its report.
TINY_MODEL_NEEDS = ("config.json", "model.safetensors", "tokenizer_config.json", "tokenizer.json", WARM_START_FILE)


def tiny_model_problem(name: str) -> str | None:
    """Why the cached tiny model ``name`` is not what was built (a file missing, or changed since), in one line;
    None when it is, or when it is not built. A folder without the cache's record of its files is judged by
    :data:`TINY_MODEL_NEEDS` and the weights' sha256 its own ``warm_start.json`` recorded as it was built."""
    from mutualrl.assets.cache import FILES_RECORD, cached_folder_problem

    if not is_tiny_model_cached(name):
        return None
    folder = tiny_model_dir(name)
    digests: dict[str, str] = {}
    if not (folder / FILES_RECORD).exists() and not (folder / FILES_RECORD).is_symlink():
        try:
            recorded = json.loads((folder / WARM_START_FILE).read_text()).get("sha256")
        except (OSError, ValueError, AttributeError, RecursionError):
            recorded = None
        if not isinstance(recorded, str):
            return f"{folder / WARM_START_FILE}: records no sha256 of the weights tiny model {name!r} was built with"
        digests = {"model.safetensors": recorded}
    return cached_folder_problem(folder, f"tiny model {name!r}", TINY_MODEL_NEEDS, digests)


def refuse_damaged_tiny_model(name: str) -> None:
    """Raise :class:`AssetError` in one line when the cached tiny model ``name`` is not what was built."""
    problem = tiny_model_problem(name)
    if problem is not None:
        raise AssetError(f"{problem}; the cache is not what was built: delete {tiny_model_dir(name)} and run "
                         f"`mutualrl assets fetch model:{name}` to build it again")


def read_warm_start_report(name: str) -> dict[str, Any]:
    """The ``warm_start.json`` of a built tiny model (recipe, accuracies, timings)."""
    path = tiny_model_dir(name) / WARM_START_FILE
    if not path.is_file():
        raise AssetError(f"tiny model {name!r} is not built yet ({path} missing); run `mutualrl assets fetch`")
    return json.loads(path.read_text())


# ---------------------------------------------------------------------------------------
# Cache: build once, with progress
# ---------------------------------------------------------------------------------------


def _progress_bar() -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(), TimeRemainingColumn(),
        console=progress_console(), transient=False,
    )


def ensure_tiny_model(name: str) -> Path:
    """The cached folder of tiny model ``name``, warm-starting it first if needed (in a process of its own)."""
    if name not in TINY_MODELS:
        raise AssetError(f"unknown tiny model {name!r}; known: {', '.join(TINY_NAMES)}")
    if not is_tiny_model_cached(name):
        _build_in_subprocesses([name])
    refuse_damaged_tiny_model(name)  # the files it was built with, each as built: never trained from another
    return tiny_model_dir(name)


def ensure_tiny_models(names: tuple[str, ...] | list[str] = TINY_NAMES) -> dict[str, Path]:
    """Every named tiny model, building the missing ones side by side (one process and thread each)."""
    missing = [n for n in names if not is_tiny_model_cached(n)]
    if missing:
        _build_in_subprocesses(missing)
    return {n: ensure_tiny_model(n) for n in names}


def build_environment(environ: dict[str, str]) -> dict[str, str]:
    """A build process's environment: the caller's, the allocator's settings, the source tree first on the path, and
    :data:`BUILD_ENV` over everything (a user's ``ATEN_CPU_CAPABILITY`` would give another model)."""
    env = dict(environ, **allocator_env(environ))
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return {**env, **BUILD_ENV}


def _build_in_subprocesses(names: list[str]) -> None:
    env = build_environment(dict(os.environ))
    procs = {
        n: subprocess.Popen([sys.executable, "-m", "mutualrl.pools.tiny", n], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
        for n in names
    }
    errors: dict[str, list[str]] = {n: [] for n in names}
    with _progress_bar() as bar:
        tasks = {n: bar.add_task(f"warm start {n}", total=TINY_MODELS[n].total_steps(), loss="-") for n in names}

        def follow(n: str) -> None:
            for line in procs[n].stdout:  # type: ignore[union-attr]
                try:
                    msg = json.loads(line)
                    bar.update(tasks[n], completed=msg["step"], total=msg["total"], loss=f"{msg['loss']:.3f}")
                except (ValueError, KeyError):
                    pass

        def drain(n: str) -> None:
            errors[n] = procs[n].stderr.read().splitlines()  # type: ignore[union-attr]

        threads = [threading.Thread(target=f, args=(n,), daemon=True) for n in names for f in (follow, drain)]
        for t in threads:
            t.start()
        codes = {n: p.wait() for n, p in procs.items()}
        for t in threads:
            t.join()
    failed = {n: c for n, c in codes.items() if c != 0}
    if failed:
        details = "; ".join(f"{n} (exit {c}): " + " | ".join(errors[n][-3:]) for n, c in failed.items())
        raise AssetError(f"warm start of tiny model(s) failed: {details}")


def build_here(name: str, progress: ProgressFn | None = None) -> Path:
    """Warm-start ``name`` in this process, which must run under :data:`BUILD_ENV` (locked, atomic)."""
    unpinned = {k: os.environ.get(k) for k, v in BUILD_ENV.items() if os.environ.get(k) != v}
    if unpinned:
        raise AssetError(f"a tiny model is built under {BUILD_ENV} (this process has {unpinned}): "
                         "use mutualrl.pools.tiny.ensure_tiny_model")
    dest = tiny_model_dir(name)
    if is_tiny_model_cached(name):  # complete (it appears whole): nothing to build, no lock
        return dest
    with asset_lock("models", dest.name):
        if not is_tiny_model_cached(name):
            with building(dest) as tmp:
                warm_start(TINY_MODELS[name], tmp, progress)
    return dest


def _main(argv: list[str]) -> int:
    """``python -m mutualrl.pools.tiny NAME``: build one model, progress as JSON lines on stdout."""
    if len(argv) != 1 or argv[0] not in TINY_MODELS:
        print(f"usage: python -m mutualrl.pools.tiny {{{','.join(TINY_NAMES)}}}", file=sys.stderr)
        return 2

    def emit(step: int, total: int, loss: float) -> None:
        if step == total or step % 5 == 0:
            print(json.dumps({"step": step, "total": total, "loss": loss}), flush=True)

    try:
        print(build_here(argv[0], progress=emit), file=sys.stderr)
    except AssetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

"""Finished run folders without training, for ``mutualrl report`` and ``plot --group-by``: config.yaml, run.json,
inputs.json, metrics.jsonl validation rows and ``eval/<policy>/step-N.json`` files, as ``mutualrl train`` writes
them (docs/run-layout.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from mutualrl.evaluation.results import ModelEvalResult, PromptResult

POLICIES = ("tiny-bpe", "tiny-sp")
GROUPS = ("add", "sub")


def fake_config(regime: str, seed: int, out: Path, **settings: Any) -> dict[str, Any]:
    """A resolved config as config.yaml holds it; ``settings`` as dotted keys (``grpo__learning_rate``)."""
    config: dict[str, Any] = {
        "pool": {"name": "tiny", "policies": [{"name": p, "model": f"builtin:{p}", "lora": None} for p in POLICIES]},
        "regime": {"name": regime, "sgt": {"lam": 0.3}, "prp": {"denominator": "peer"}},
        "task": {"name": "dataset", "source": "data", "reward_funcs": ["my_rewards.exact"]},
        "grpo": {"seed": seed, "learning_rate": 1e-4, "max_steps": 3, "num_generations": 4},
        "launch": {"gpus": None}, "output_dir": str(out),
    }
    for dotted, value in settings.items():
        node = config
        *parents, last = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return config


def write_finished_run(folder: Path, regime: str, seed: int, scores: dict[str, list[float]], *, steps: int = 3,
                       status: str = "done", data_sha: str = "a" * 64, summary: dict[str, Any] | None = None,
                       resumes: list[dict[str, Any]] | None = None, **settings: Any) -> Path:
    """A run whose last validation (step ``steps``) scored ``scores[policy]`` per held-out prompt; prompts
    alternate between the task groups ``add`` and ``sub``. A step-0 validation at 0.0 sits before it.

    ``summary``: fields of a summary.json (``seen_prompts``, ``restarted``, ...; none is written without it);
    ``resumes``: run.json's ``resumes`` (``--resume`` launches, :func:`mutualrl.launch.rundir.record.resumes_entry`).
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(fake_config(regime, seed, folder, **settings)))
    (folder / ".mutualrl-run").write_text(json.dumps({"run_id": f"{folder.name}-0"}))
    record = {"pool": "tiny", "regime": regime, "task": "dataset", "status": status,
              "policies": [{"name": p} for p in POLICIES], **({"resumes": resumes} if resumes is not None else {})}
    (folder / "run.json").write_text(json.dumps(record))
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps({"pool": "tiny", "regime": regime, "seed": seed,
                                                         "policies": {}, **summary}))
    (folder / "inputs.json").write_text(json.dumps({"format": 1, "code": {"my_rewards": {"file": "x", "sha256": "c" * 64}},
                                                    "data": {"train.jsonl": data_sha, "eval.jsonl": "b" * 64}}))
    rows = []
    for policy, values in scores.items():
        for step, step_scores in ((0, [0.0] * len(values)), (steps, values)):
            result = ModelEvalResult(model=f"builtin:{policy}", policy=policy, step=step, split="eval", records=[
                PromptResult(f"p{i}", "dataset", f"{i}+1=", "x", str(i + 1), None, score)
                for i, score in enumerate(step_scores)])
            result.save(folder / "eval" / policy / f"step-{step:06d}.json")
            row = {"kind": "eval", "policy": policy, "step": step, "regime": regime,
                   "eval/reward@1": result.reward_at_1, "eval/n": result.n}
            for g, group in enumerate(GROUPS):
                part = step_scores[g::2]
                row[f"eval/group/{group}/reward@1"] = sum(part) / len(part)
            rows.append(row)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def write_sweep(folder: Path, scores: dict[str, list[list[float]]]) -> Path:
    """A sweep folder of finished runs: ``scores[regime][seed - 1]`` are tiny-bpe's per-prompt scores (tiny-sp's
    the same, reversed)."""
    for regime, runs in scores.items():
        for seed, values in enumerate(runs, start=1):
            write_finished_run(folder / f"{regime}-seed{seed}", regime, seed,
                               {"tiny-bpe": values, "tiny-sp": values[::-1]})
    return folder

"""Synthetic run folders (metrics.jsonl + run.json, docs/run_layout) for plot and complementarity tests."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

POLICIES = ("qwen-a", "qwen-b")


def write_run(folder: Path, regime: str, *, steps: int = 30, eval_every: int = 5, seed: int = 0,
              pool: str = "2qwen", tasks: tuple[str, ...] = ("math", "gsm8k"), truncated_tail: bool = False,
              groups: tuple[str, ...] = ()) -> Path:
    """A run folder with train lines every step and eval lines every ``eval_every`` steps (step 0 included)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    info = {"pool": pool, "regime": regime, "task": tasks[0],
            "policies": [{"name": p, "model": f"hub/{p}", "tokenizer": None} for p in POLICIES],
            "started": "2026-01-01T00:00:00", "finished": None, "status": "done"}
    (folder / "run.json").write_text(json.dumps(info))
    lift = {"standalone": 0.10, "xgrpo": 0.12, "sgt": 0.16, "prp": 0.04}.get(regime, 0.1)
    lines = []
    for k, policy in enumerate(POLICIES):
        base = 0.35 + 0.1 * k
        for step in range(steps + 1):
            progress = 1 - math.exp(-step / 12)
            if step % eval_every == 0:
                line = {"kind": "eval", "policy": policy, "step": step, "regime": regime, "time": 1000.0 + step,
                        "eval/reward@1": base + lift * progress + rng.uniform(-0.01, 0.01), "eval/n": 200}
                if len(tasks) > 1:  # per-task keys only when validating on several tasks (run_layout)
                    for j, task in enumerate(tasks):
                        line[f"eval/{task}/reward@1"] = base - 0.1 * j + lift * progress
                for j, group in enumerate(groups):  # task groups, as the synthetic task logs its families
                    line[f"eval/group/{group}/reward@1"] = (0.9 if j == k else lift * progress)
                lines.append(line)
            if step == 0:
                continue
            line = {"kind": "train", "policy": policy, "step": step, "regime": regime, "time": 1000.0 + step,
                    "reward_mean": base + lift * progress + rng.uniform(-0.05, 0.05), "reward_std": 0.3,
                    "entropy": 0.9 - 0.2 * progress + (0.05 if regime == "sgt" else 0) + rng.uniform(-0.02, 0.02),
                    "kl": 0.001 * step * (2.0 if regime == "prp" else 1.0), "loss": 0.01, "learning_rate": 1e-6,
                    "grad_norm": 0.5}
            if regime == "sgt":
                line["sgt/gate_rate"] = max(0.0, 0.2 - 0.15 * progress + rng.uniform(-0.01, 0.01))
                line["sgt/rescues"] = int(10 * (1 - progress))
            lines.append(line)
    text = "\n".join(json.dumps(line) for line in lines) + "\n"
    if truncated_tail:
        text += '{"kind": "train", "policy": "qwen-a", "st'
    (folder / "metrics.jsonl").write_text(text)
    return folder

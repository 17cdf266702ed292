"""A paper model's full shape on one GPU: random weights from its config, planned as ``mutualrl train`` plans it, two
steps through the same worker, the measured peak memory beside the plan's figures (prints one JSON object).

Weights cannot travel to a GPU machine without network; a config can. The model is initialised randomly at the paper
model's shape (``launch/plan/model_shapes.py`` KNOWN_SHAPES: layers, heads, KV heads, head size, MLP width, vocabulary)
on the device, saved as a local model folder, and trained by ``mutualrl train`` as a one-policy standalone pool on the
tiny pool's task, with completions long enough to hold real activations (a random model rarely ends one early). The
plan is the one the run prints (``--dry-run --save-plan``): the model state per device, the micro-batch's activations
and the generation's KV cache. The worker logs ``gpu/peak_allocated_gib`` per step (training/callbacks.py).

    python benchmarks/gpu_full_shape.py --out /tmp/full-shape                       # GPU: Qwen3-4B-Base, 36 layers
    python benchmarks/gpu_full_shape.py --out /tmp/full-shape --layers 2 --completion 16   # the CPU rehearsal

The tokenizer is the tiny pool's GPT-2 one (its ids are a subset of any paper vocabulary, and the head keeps the
paper model's full vocabulary, which is what its memory depends on).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_TYPES = {"Qwen/Qwen3": "qwen3", "Qwen/Qwen2.5": "qwen2", "meta-llama/": "llama", "microsoft/Phi": "phi3",
               "ministral/": "mistral"}
UNTIED = {"ministral/Ministral-3b-instruct"}  # the others tie their input and output embeddings


def build_model(model: str, layers: int | None, folder: Path, device: str) -> dict:
    """Save a randomly initialised model of ``model``'s shape (``layers`` of them; None: all) into ``folder``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from mutualrl.launch.plan.model_shapes import KNOWN_SHAPES
    from mutualrl.pools.loading import PAPER_MODEL_CONTEXTS
    from mutualrl.pools.tiny import ensure_tiny_model

    all_layers, kv_heads, head_dim, vocab, hidden, heads, intermediate, _ = KNOWN_SHAPES[model]
    kind = next(kind for prefix, kind in MODEL_TYPES.items() if model.startswith(prefix))
    config = AutoConfig.for_model(kind, num_hidden_layers=layers or all_layers, num_key_value_heads=kv_heads,
                                  head_dim=head_dim, vocab_size=vocab, hidden_size=hidden, num_attention_heads=heads,
                                  intermediate_size=intermediate, max_position_embeddings=PAPER_MODEL_CONTEXTS[model],
                                  tie_word_embeddings=model not in UNTIED, dtype="bfloat16")
    started = time.perf_counter()
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):
        built = AutoModelForCausalLM.from_config(config, dtype=dtype)
    built.save_pretrained(folder)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(ensure_tiny_model("tiny-bpe")).save_pretrained(folder)
    params = sum(p.numel() for p in built.parameters())
    del built
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"model": model, "layers": config.num_hidden_layers, "params": params,
            "built_s": round(time.perf_counter() - started, 1)}


def recipe(folder: Path, out: Path, args: argparse.Namespace, device: str) -> Path:
    """A one-policy pool on the tiny pool's task with the model folder, the paper's settings that shape memory."""
    import yaml

    settings = {
        "extends": str(ROOT / "recipes" / "pools" / "tiny.yaml"),
        "pool": {"name": "full-shape", "policies": [{"name": "full-shape", "model": str(folder)}]},
        "regime": {"name": "standalone"},
        "grpo": {"max_completion_length": args.completion, "per_device_train_batch_size": args.rows,
                 "num_generations": 4, "max_steps": args.steps, "save_steps": 1000, "use_vllm": False,
                 "gradient_checkpointing": device == "cuda", "learning_rate": 1.0e-6, "warmup_steps": 0},
        "validation": {"every_steps": 0, "at_start": False, "limit": 8},  # the end's validation: 8 prompts
        "launch": {"deepspeed": args.deepspeed or ("zero3" if device == "cuda" else "none")},
        "output_dir": str(out / "run"),
    }
    path = out / "full-shape.yaml"
    path.write_text(yaml.safe_dump(settings, sort_keys=False))
    return path


def planned(plan_file: Path) -> dict:
    """The plan's per-device figures for the one policy (GiB)."""
    policy = json.loads(plan_file.read_text())["policies"][0]
    memory, batch = policy.get("memory") or {}, policy.get("micro_batch") or {}
    return {"model_state_gib": round((memory.get("bytes_per_device") or 0) / 2**30, 3),
            "activations_gib": round(batch.get("activation_gib") or 0.0, 3), "micro_batch": batch.get("how"),
            "per_device_train_batch_size": policy["grpo"].get("per_device_train_batch_size"),
            "gradient_checkpointing": policy["grpo"].get("gradient_checkpointing")}


def measured(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{"step": r["step"], "peak_gib": r.get("gpu/peak_allocated_gib"), "step_time": r.get("step_time")}
            for r in rows if r.get("kind") == "train"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the model, the recipe, the run")
    parser.add_argument("--model", default="Qwen/Qwen3-4B-Base", help="a paper model of model_shapes.KNOWN_SHAPES")
    parser.add_argument("--layers", type=int, default=None, help="layers to build (default: the model's all)")
    parser.add_argument("--completion", type=int, default=1024, help="grpo.max_completion_length")
    parser.add_argument("--rows", type=int, default=8, help="grpo.per_device_train_batch_size (K = 4)")
    parser.add_argument("--steps", type=int, default=2, help="training steps")
    parser.add_argument("--deepspeed", default=None, help="launch.deepspeed (default: zero3 on CUDA, none on a CPU)")
    args = parser.parse_args()
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    folder = args.out / "model"
    report: dict = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu"}
    report["built"] = build_model(args.model, args.layers, folder, device)
    path = recipe(folder, args.out, args, device)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    gpus = ["--gpus", "1"] if device == "cuda" else []
    plan_file = args.out / "plan.json"
    dry = subprocess.run([sys.executable, "-m", "mutualrl", "train", "--pool", str(path), *gpus, "--dry-run",
                          "--save-plan", str(plan_file)], env=env, capture_output=True, text=True)
    if dry.returncode != 0:
        report["plan_failed"] = (dry.stdout + dry.stderr)[-2000:]
        print(json.dumps(report, indent=1))
        return 1
    report["plan"] = planned(plan_file)
    started = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "mutualrl", "train", "--pool", str(path), *gpus, "--overwrite"],
                         env=env, capture_output=True, text=True)
    report["train"] = {"rc": run.returncode, "wall_s": round(time.perf_counter() - started, 1)}
    if run.returncode != 0:
        report["train"]["tail"] = (run.stdout + run.stderr)[-2000:]
    else:
        steps = measured(args.out / "run")
        report["train"]["steps"] = steps
        peaks = [s["peak_gib"] for s in steps if s["peak_gib"] is not None]
        if peaks:
            plan = report["plan"]
            report["peak_vs_plan"] = round(max(peaks) / (plan["model_state_gib"] + plan["activations_gib"]), 3)
    print(json.dumps(report, indent=1))
    return 0 if run.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())

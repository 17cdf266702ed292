"""Infrastructure fidelity (paper App. "Infrastructure fidelity: reproducing VERL GRPO").

Runs ``mutualrl train --regime standalone`` on a one-policy pool (the real launcher and
worker process) and vanilla ``trl.GRPOTrainer`` on the same model, data, seed and
GRPOConfig, then compares the parameters after N steps. Prints one JSON object::

    {"steps": N, "max_frac_reward_zero_std": z, "max_abs_param_diff": d, "params_moved": m,
     "mutualrl_s": .., "vanilla_s": ..}

``params_moved`` (max |theta_N - theta_0| of the reference run) shows the comparison is not
vacuous; both trainers add :func:`fidelity_rewards.alternating` to the task's verifier, so every group has
a nonzero advantage on any model (a model that answers a prompt's K samples alike moved nothing with the
verifier alone). Usage::

    python benchmarks/fidelity.py [--steps 4] [--model builtin:tiny-bpe] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
SIGNAL_REWARD = "fidelity_rewards.alternating"


def write_recipe(path: Path, model: str, steps: int, seed: int) -> None:
    recipe = {
        "pool": {"name": "fidelity", "description": "one policy, standalone",
                 "policies": [{"name": "solo", "model": model}]},
        "regime": {"name": "standalone"},
        "task": {"name": "synthetic-arith", "max_prompt_tokens": 64, "train_limit": 200, "eval_limit": 16,
                 "reward_funcs": [SIGNAL_REWARD]},
        "grpo": {"learning_rate": 5e-3, "num_generations": 4, "per_device_train_batch_size": 16,
                 "max_completion_length": 6, "max_steps": steps, "logging_steps": 1, "save_strategy": "no",
                 "seed": seed, "beta": 0.0, "loss_type": "grpo", "report_to": []},
        "validation": {"every_steps": 0, "at_start": False, "limit": 16, "batch_size": 16},
    }
    path.write_text(yaml.safe_dump(recipe))


def vanilla_child(run_dir: Path, model_dir: Path, out: Path) -> None:
    """Vanilla TRL on exactly what the mutualrl worker used (its data file and GRPOConfig)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from mutualrl.launch.plan.launch_plan import LaunchPlan
    from mutualrl.training.data import TRAIN_FILE, read_examples, to_trl_rows
    from fidelity_rewards import alternating

    from mutualrl.tasks import make_reward_function

    grpo = dict(LaunchPlan.read(run_dir).policy("solo").grpo)
    grpo.update(output_dir=str(out / "vanilla"), disable_tqdm=True)
    dataset = Dataset.from_list(to_trl_rows(read_examples(run_dir / "data" / TRAIN_FILE), chat=False))
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = GRPOTrainer(model=model, reward_funcs=[make_reward_function("synthetic-arith"), alternating],
                           args=GRPOConfig(**grpo),
                          train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    trainer.save_model(str(out / "vanilla-final"))


def max_abs_diff(a_dir: Path, b_dir: Path) -> float:
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(a_dir)
    b = AutoModelForCausalLM.from_pretrained(b_dir)
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters(), strict=True))


def run(steps: int, model: str, workdir: Path, seed: int = 11) -> dict:
    from mutualrl.launch.plan.launch_plan import LaunchPlan
    from mutualrl.pools.loading import resolve_model_path

    model_dir = Path(resolve_model_path(model))
    recipe = workdir / "fidelity.yaml"
    write_recipe(recipe, model, steps, seed)
    run_dir = workdir / "run"
    paths = [str(ROOT / "src"), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mutualrl", "train", "--pool", str(recipe), "-o", str(run_dir)],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    mutual_s = time.perf_counter() - started
    # The vanilla run gets the same thread count as the mutualrl worker had.
    spec_env = LaunchPlan.read(run_dir).policy("solo").launch.env
    child_env = {**env, **{k: v for k, v in spec_env.items() if k.endswith("_NUM_THREADS")}, "CUDA_VISIBLE_DEVICES": ""}
    started = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--vanilla-child", str(run_dir), str(model_dir), str(workdir)],
                   check=True, env=child_env)
    vanilla_s = time.perf_counter() - started
    train_rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                  if line.strip() and json.loads(line).get("kind") == "train"]
    return {
        "steps": steps,
        # The share of groups whose rewards were all equal, at the step with most: 1.0 would mean no gradient.
        "max_frac_reward_zero_std": max(row["frac_reward_zero_std"] for row in train_rows),
        "max_abs_param_diff": max_abs_diff(run_dir / "policies" / "solo" / "final", workdir / "vanilla-final"),
        "params_moved": max_abs_diff(model_dir, workdir / "vanilla-final"),
        "mutualrl_s": round(mutual_s, 2),
        "vanilla_s": round(vanilla_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--model", default="builtin:tiny-bpe",
                        help="a model that earns some reward on synthetic-arith, so the parameters move")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--vanilla-child", nargs=3, metavar=("RUN", "MODEL", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.vanilla_child:
        run_dir, model_dir, out = map(Path, args.vanilla_child)
        vanilla_child(run_dir, model_dir, out)
        return
    if args.workdir is None:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(run(args.steps, args.model, Path(tmp))))
    else:
        args.workdir.mkdir(parents=True, exist_ok=True)
        print(json.dumps(run(args.steps, args.model, args.workdir)))


if __name__ == "__main__":
    main()

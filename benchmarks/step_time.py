"""Standalone-regime step time vs vanilla TRL GRPOTrainer on the same tiny model (target: within 3%).

Both trainers run in this process on the same model, data, GRPOConfig and thread count;
the mutualrl side is what a policy process runs in the standalone regime
(``MutualGRPOTrainer`` with its adapter and the metrics/status/heartbeat callbacks).
Rounds alternate (vanilla, mutualrl, vanilla, ...) so machine noise hits both; each
round trains ``--steps`` steps and the per-step time is TRL's own ``step_time`` metric
(median over steps; one warm-up round per kind and the first steps of each round dropped). Prints JSON with the median ratio::

    python benchmarks/step_time.py [--rounds 5] [--steps 12] [--tokenizer gpt2] [--warmup-rounds 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))


def rows(n: int = 256) -> list[dict]:
    from mutualrl.tasks.registry import get_task

    return [ex.as_row() for ex in get_task("synthetic-arith").load("train", limit=n)]


def grpo_args(out: str, steps: int):
    from trl import GRPOConfig

    import torch

    # On a GPU machine both trainers run on the GPU (benchmarks/gpu_smoke.py); else on the CPU.
    return GRPOConfig(output_dir=out, use_cpu=not torch.cuda.is_available(), bf16=False, per_device_train_batch_size=16, num_generations=4,
                      max_completion_length=8, max_steps=steps, logging_steps=1, report_to=[], learning_rate=1e-3,
                      save_strategy="no", disable_tqdm=True, seed=3, loss_type="grpo")


def step_times(trainer) -> list[float]:
    trainer.train()
    return [h["step_time"] for h in trainer.state.log_history if "step_time" in h]


def one_round(kind: str, model_dir: Path, dataset, steps: int, tmp: Path) -> list[float]:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from mutualrl.tasks import make_reward_function

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    common = dict(model=model, reward_funcs=make_reward_function("synthetic-arith"), args=grpo_args(str(tmp / kind), steps),
                  train_dataset=dataset, processing_class=tokenizer)
    if kind == "vanilla":
        return step_times(GRPOTrainer(**common))
    from mutualrl.config import load_run_config
    from mutualrl.training.adapters import make_regime_adapter
    from mutualrl.training.callbacks import MetricsCallback, StatusCallback
    from mutualrl.run_folder import RunPaths
    from mutualrl.training.trainer import MutualGRPOTrainer

    config = load_run_config("tiny", regime="standalone", check_grpo=False).config
    paths = RunPaths(tmp / "run")
    callbacks = [MetricsCallback(paths, "tiny-bpe", "standalone"), StatusCallback(paths, "tiny-bpe")]
    trainer = MutualGRPOTrainer(**common, callbacks=callbacks, policy_name="tiny-bpe",
                                regime=make_regime_adapter(config, "tiny-bpe", None))
    return step_times(trainer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--tokenizer", default="gpt2")
    parser.add_argument("--warmup-rounds", type=int, default=1,
                        help="untimed rounds of each kind before the timed ones (0: a smoke test's size, no warm-up)")
    args = parser.parse_args()
    import torch
    from datasets import Dataset
    from tiny_models import build_tiny_lm

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model_dir = build_tiny_lm(args.tokenizer, tmp / "model")
        dataset = Dataset.from_list(rows())
        times: dict[str, list[float]] = {"vanilla": [], "mutualrl": []}
        for _ in range(args.warmup_rounds):
            for kind in ("vanilla", "mutualrl"):  # warm-up round of each (first-touch costs), not measured
                one_round(kind, model_dir, dataset, args.warmup + 1, tmp / f"warm-{kind}")
        for r in range(args.rounds):
            for kind in (("vanilla", "mutualrl") if r % 2 == 0 else ("mutualrl", "vanilla")):
                times[kind] += one_round(kind, model_dir, dataset, args.steps, tmp / f"r{r}")[args.warmup:]
    vanilla, mutual = statistics.median(times["vanilla"]), statistics.median(times["mutualrl"])
    print(json.dumps({
        "rounds": args.rounds, "steps_per_round": args.steps, "torch_threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "vanilla_step_s_median": round(vanilla, 5), "mutualrl_standalone_step_s_median": round(mutual, 5),
        "ratio": round(mutual / vanilla, 4), "target": "<= 1.03",
    }))


if __name__ == "__main__":
    main()

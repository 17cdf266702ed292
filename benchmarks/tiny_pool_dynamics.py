"""Dynamics of the tiny pool under vanilla TRL GRPO, and a proxy for Success-Gated Transfer.

Measures, for one warm-started tiny policy (``builtin:tiny-bpe`` or ``builtin:tiny-sp``),
with TRL's own ``GRPOTrainer`` and the ``grpo:`` settings of ``recipes/pools/tiny.yaml``:

- ``--mode standalone``: plain GRPO on ``synthetic-arith``; time per step and held-out
  greedy accuracy per family every ``--eval-every`` steps.
- ``--mode sgt-proxy``: the same, plus the SGT term of the paper (Sec. "Regime 3", App.
  "Implementation details for SGT"): on each prompt where all K of the learner's rollouts
  fail (reward < 0.2) and the PEER solved it, add ``lam * NLL`` of the peer's successful
  completion, retokenized into the learner's vocabulary (text -> learner tokens, after the
  learner's own prompt ids). The peer here is the other warm-started tiny model, frozen:
  its greedy completions on the train prompts, kept where verified correct. (The real
  trainer uses the live peer's sampled successes of the same step.)
- ``--mode eval``: held-out accuracy per family of both warm-started models (greedy and,
  with ``--samples K``, the share of prompts where at least one of K samples at T=1 is right).

Prints one JSON object. Run from the repository root::

    PYTHONPATH=src python benchmarks/tiny_pool_dynamics.py --mode eval --samples 4
    PYTHONPATH=src python benchmarks/tiny_pool_dynamics.py --mode standalone --policy tiny-bpe
    PYTHONPATH=src python benchmarks/tiny_pool_dynamics.py --mode sgt-proxy --policy tiny-bpe
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

import torch


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("standalone", "sgt-proxy", "eval"), default="standalone")
    p.add_argument("--policy", choices=("tiny-bpe", "tiny-sp"), default="tiny-bpe")
    p.add_argument("--steps", type=int, default=None, help="max_steps (default: tiny.yaml)")
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--lam", type=float, default=None, help="SGT lambda (default: tiny.yaml regime.sgt.lam)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (mutualrl train gives each policy 1 on 2 cores)")
    p.add_argument("--samples", type=int, default=0, help="eval mode: also pass@K at T=1 with K samples")
    p.add_argument("--limit-per-family", type=int, default=None,
                   help="eval mode: the first N prompts of each family (default: the whole split; a smoke test's size)")
    p.add_argument("--freeze-embeddings", action="store_true", help="diagnostic: train without the (tied) embeddings")
    p.add_argument("--log-history", action="store_true", help="include TRL's per-step logs in the JSON")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="recipe override, e.g. grpo.learning_rate=3e-4 or regime.sgt.lam=0.2")
    return p.parse_args(argv)


def load_policy(name: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mutualrl.pools.builtin import ensure_builtin_model

    path = ensure_builtin_model(name)
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def run_eval(args: argparse.Namespace) -> dict[str, Any]:
    from mutualrl.pools.tiny import read_warm_start_report
    from mutualrl.pools.tiny_warm_start import family_accuracies, sampled_accuracies

    result: dict[str, Any] = {}
    for name in ("tiny-bpe", "tiny-sp"):
        model, tokenizer = load_policy(name)
        entry: dict[str, Any] = {
            "greedy_test": family_accuracies(model, tokenizer, "test", args.limit_per_family),
            "greedy_train": family_accuracies(model, tokenizer, "train", args.limit_per_family),
            "warm_start_seconds": read_warm_start_report(name)["train_seconds"],
            "parameters": sum(p.numel() for p in model.parameters()),
        }
        if args.samples:
            entry[f"sampled_T1_K{args.samples}_test"] = sampled_accuracies(model, tokenizer, "test", k=args.samples,
                                                                           limit_per_family=args.limit_per_family)
        result[name] = entry
    return result


def peer_successes(peer_name: str) -> dict[str, str]:
    """prompt_id -> the peer's greedy completion text, for train prompts it solves."""
    from mutualrl.pools.tiny_warm_start import greedy_answers
    from mutualrl.tasks.synthetic import SyntheticArithTask

    task = SyntheticArithTask()
    model, tokenizer = load_policy(peer_name)
    train = task.load("train")
    texts = greedy_answers(model, tokenizer, [e.prompt for e in train])
    return {e.prompt_id: t for e, t in zip(train, texts, strict=True) if task.score(t, e.answer) == 1.0}


def run_training(args: argparse.Namespace) -> dict[str, Any]:
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from mutualrl.config import load_run_config
    from mutualrl.pools.tiny_warm_start import family_accuracies
    from mutualrl.tasks.synthetic import SyntheticArithTask

    recipe = load_run_config("tiny", overrides=args.overrides).config
    grpo = dict(recipe.grpo)
    if args.steps is not None:
        grpo["max_steps"] = args.steps
    lam = recipe.regime.sgt.lam if args.lam is None else args.lam
    grpo.update(bf16=False, use_cpu=True, save_strategy="no", report_to=[], disable_tqdm=True, logging_steps=1)
    grpo.pop("save_steps", None)

    task = SyntheticArithTask()
    model, tokenizer = load_policy(args.policy)
    train = Dataset.from_list([e.as_row() for e in task.load("train")])
    last_rewards: list[tuple[str, float]] = []

    def reward(prompts, completions, answer, prompt_id, **_: Any) -> list[float]:
        scores = [task.score(c, a) for c, a in zip(completions, answer, strict=True)]
        last_rewards[:] = list(zip(prompt_id, scores, strict=True))
        return scores

    evals: list[dict[str, Any]] = []
    step_ends: list[float] = []

    class Probe(TrainerCallback):
        def on_step_end(self, _args, state, control, model=None, **kw):  # noqa: ANN001
            step_ends.append(time.perf_counter())
            if state.global_step % args.eval_every == 0 or state.global_step == state.max_steps:
                t = time.perf_counter()
                evals.append({"step": state.global_step, **family_accuracies(model, tokenizer, "test"),
                              "eval_seconds": round(time.perf_counter() - t, 2)})
                model.train()
                step_ends[-1] = time.perf_counter()  # do not bill the evaluation to the next step

    trainer_cls: type = GRPOTrainer
    extra: dict[str, Any] = {}
    sgt_log: list[int] = []
    if args.mode == "sgt-proxy":
        peer = "tiny-sp" if args.policy == "tiny-bpe" else "tiny-bpe"
        successes = peer_successes(peer)
        prompt_text = {e.prompt_id: e.prompt for e in task.load("train")}
        threshold = recipe.regime.sgt.failure_threshold

        class SGTProxy(GRPOTrainer):
            """GRPO + lam * NLL on a verified peer success where the learner's whole group failed."""

            _sgt_batch: Any = None

            def _generate_and_score_completions(self, inputs):  # noqa: ANN001
                out = super()._generate_and_score_completions(inputs)
                groups: dict[str, list[float]] = defaultdict(list)
                for pid, r in last_rewards:
                    groups[pid].append(r)
                gated = [pid for pid, rs in groups.items() if max(rs) < threshold and pid in successes]
                sgt_log.append(len(gated))
                self._sgt_batch = self._pack(gated) if gated else None
                return out

            def _pack(self, gated: list[str]) -> tuple[torch.Tensor, ...]:
                seqs = []
                for pid in gated:
                    p = tokenizer(prompt_text[pid])["input_ids"]
                    full = tokenizer(prompt_text[pid] + successes[pid])["input_ids"]
                    seqs.append((p, full[len(p):] + [tokenizer.eos_token_id]))
                width = max(len(p) + len(c) for p, c in seqs)
                ids = torch.full((len(seqs), width), tokenizer.pad_token_id)
                mask = torch.zeros_like(ids)
                labels = torch.full_like(ids, -100)
                for i, (p, c) in enumerate(seqs):
                    ids[i, :len(p) + len(c)] = torch.tensor(p + c)
                    mask[i, :len(p) + len(c)] = 1
                    labels[i, len(p):len(p) + len(c)] = torch.tensor(c)
                return ids, mask, labels

            def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001
                loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
                if self._sgt_batch is not None:
                    ids, mask, labels = self._sgt_batch
                    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
                    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels[:, 1:].flatten(),
                                                            ignore_index=-100)  # per-token mean, as the paper
                    loss = loss + lam * nll
                return loss

        trainer_cls = SGTProxy
        extra["peer_successes_on_train"] = len(successes)

    if args.freeze_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    torch.set_num_threads(args.threads)
    before = {"step": 0, **family_accuracies(model, tokenizer, "test")}
    with tempfile.TemporaryDirectory() as out_dir:
        config = GRPOConfig(output_dir=out_dir, **grpo)
        trainer = trainer_cls(model=model, args=config, reward_funcs=[reward], train_dataset=train,
                              processing_class=tokenizer, callbacks=[Probe()])
        trainer.remove_callback(PrinterCallback)  # keep stdout for the JSON result
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
    step_times = [b - a for a, b in zip([start, *step_ends[:-1]], step_ends, strict=True)]
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    result = {
        "policy": args.policy,
        "mode": args.mode,
        "threads": args.threads,
        "grpo": {k: grpo[k] for k in ("learning_rate", "num_generations", "per_device_train_batch_size",
                                       "max_completion_length", "max_steps", "temperature", "beta") if k in grpo},
        "wall_seconds_train_incl_eval": round(wall, 1),
        "seconds_per_step_median": round(statistics.median(step_times), 3),
        "seconds_per_step_mean": round(statistics.mean(step_times), 3),
        "eval": [before, *evals],
        "train_reward_first5": [round(r, 3) for r in rewards[:5]],
        "train_reward_last5": [round(r, 3) for r in rewards[-5:]],
    }
    if args.log_history:
        result["log_history"] = trainer.state.log_history
    if args.mode == "sgt-proxy":
        result |= {"lam": lam, "sgt_rescues_total": sum(sgt_log), "sgt_rescues_per_step": sgt_log, **extra}
    return result


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    result = run_eval(args) if args.mode == "eval" else run_training(args)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

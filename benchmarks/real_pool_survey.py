"""What can the real offline models do, and where do they complement each other? (issue 29)

Measured *before* any training, to choose the task of the real-model demonstration. For
each model and task, on the first ``--limit`` prompts of the task's test split:

- greedy accuracy (the paper's "No Train"), and how often the answer is readable at all
  (``format``: the verifier extracts an answer);
- with ``--k`` samples at ``--temperature`` (the training setting): sampled accuracy,
  pass@K, and the share of prompts whose group is mixed (GRPO's advantage is non-zero only
  there);
- per task, the pool's complementarity as the paper reports it (App. "Prompt-level
  complementarity", "Pool-level success") from greedy success, and the SGT gate rate from
  the samples as the regime gates (regimes/sgt/spec.py, paper thresholds): P(all K learner
  rollouts score < 0.2 and at least one of the peer's K scores > 0.8).

    python benchmarks/real_pool_survey.py --out /tmp/survey            # all suites, 200 prompts each
    python benchmarks/real_pool_survey.py --tasks arc-easy-line --limit 50 --out /tmp/s

Writes ``OUT/real-pool-survey.json``; prints a table per task.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

# Answer-line variants for the QA suite (small models do not write \boxed{}); the paper's boxed
# format for MATH and GSM8K, which have no answer-line variant. Any task may also be asked with a
# few-shot prefix (``synthetic-arith-4shot``, tasks/few_shot.py).
DEFAULT_TASKS = ("boolq-line", "arc-easy-line", "piqa-line", "openbookqa-line", "siqa-line", "arc-line",
                 "hellaswag-line", "gsm8k", "math", "arc", "boolq")
# Tasks whose answer is a short line (no \boxed{}): sampled at --max-new-tokens like the answer-line tasks.
SHORT_ANSWER_TASKS = ("synthetic-arith",)
# model -> chat template on/off, as recipes/pools/smol.yaml sets them.
MODELS = {"smollm2-135m": True, "gemma3-270m": False}


def load_model(name: str) -> tuple:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mutualrl.pools.builtin import ensure_builtin_model

    folder = ensure_builtin_model(name)
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), AutoTokenizer.from_pretrained(folder)


def survey_task(name: str, chat: bool, loaded: tuple, task_name: str, args: argparse.Namespace) -> dict:
    """One model on one task: greedy, format rate, and (answer-line tasks) K samples."""
    from mutualrl.evaluation.generate import prompt_token_ids, score_examples
    from survey_sampling import mixed_groups, pass_at_k, sample_completions
    from mutualrl.pools.greedy import generate_greedy
    from mutualrl.tasks.few_shot import parse_few_shot
    from mutualrl.tasks.registry import get_task

    model, tokenizer = loaded
    task = get_task(task_name)
    base_name = (parse_few_shot(task_name) or (task_name, 0))[0]
    examples = task.load(task.default_eval_split, "offline", args.limit)
    boxed = not (base_name.endswith("-line") or base_name in SHORT_ANSWER_TASKS)
    new_tokens = args.boxed_tokens if boxed else args.max_new_tokens
    prompts = [prompt_token_ids(tokenizer, ex.prompt, chat) for ex in examples]
    t0 = time.perf_counter()
    sampled = bool(args.k) and (not boxed or args.sample_boxed)
    if sampled:  # greedy and K samples from one prefill per prompt
        groups = sample_completions(model, tokenizer, prompts, k=args.k, temperature=args.temperature,
                                    max_new_tokens=new_tokens, batch_size=args.batch_size, seed=args.seed,
                                    with_greedy=True)
        greedy, samples = [g[0] for g in groups], [g[1:] for g in groups]
    else:
        greedy = generate_greedy(model, tokenizer, prompts, max_new_tokens=new_tokens, batch_size=args.batch_size)
    t_greedy = time.perf_counter() - t0
    records = score_examples(examples, greedy)
    row: dict = {
        "n": len(examples),
        "max_new_tokens": new_tokens,
        "greedy": sum(r.score for r in records) / len(records),
        "format": sum(r.extracted is not None for r in records) / len(records),
        # What the greedy answers are: a model that always says "Yes" scores the majority rate.
        "greedy_answers": dict(Counter(str(r.extracted) for r in records).most_common()),
        "gold_answers": dict(Counter(ex.answer for ex in examples).most_common()),
        "seconds": round(t_greedy, 1),  # greedy and samples together
        "mean_prompt_tokens": round(sum(map(len, prompts)) / len(prompts), 1),
        "examples": [{"completion": r.completion, "answer": r.answer} for r in records[:3]],
        "per_prompt": {r.prompt_id: {"greedy": r.score} for r in records},
    }
    if sampled:
        scores = [[task.score(c, ex.answer) for c in group] for ex, group in zip(examples, samples, strict=True)]
        row.update({
            "sampled": sum(map(sum, scores)) / (len(scores) * args.k),
            "pass_at_k": pass_at_k(scores),
            "mixed_groups": mixed_groups(scores),
        })
        for ex, s in zip(examples, scores, strict=True):
            row["per_prompt"][ex.prompt_id]["samples"] = s
    print(f"{name:14s} {task_name:16s} answers {row['greedy_answers']} greedy {row['greedy']:.3f} format {row['format']:.2f} "
          f"sampled {row.get('sampled', float('nan')):.3f} pass@{args.k} {row.get('pass_at_k', float('nan')):.3f} "
          f"mixed {row.get('mixed_groups', float('nan')):.3f} ({row['seconds']}s) e.g. {row['examples'][0]['completion'][:40]!r}", flush=True)
    return row


def pool_numbers(models: dict, task: str, success: float = 0.8, failure: float = 0.2) -> dict:
    """Paper's complementarity tables (greedy) and the SGT gate rate (samples) for one task."""
    names = list(models)
    per = [models[m]["tasks"][task]["per_prompt"] for m in names]
    ids = sorted(set.intersection(*(set(p) for p in per)))
    greedy = {m: [per[i][pid]["greedy"] >= 0.5 for pid in ids] for i, m in enumerate(names)}
    n = len(ids)
    any_ = sum(any(greedy[m][j] for m in names) for j in range(n)) / n
    exactly_one = sum(sum(greedy[m][j] for m in names) == 1 for j in range(n)) / n
    mean_single = sum(sum(greedy[m]) for m in names) / (n * len(names))
    pairs = {}
    for learner in names:
        for peer in names:
            if learner == peer:
                continue
            fails = [j for j in range(n) if not greedy[learner][j]]
            rescued = sum(greedy[peer][j] for j in fails)
            entry = {"peer_solves_given_learner_fails": rescued / len(fails) if fails else None,
                     "learner_failures": len(fails)}
            has_samples = all("samples" in per[names.index(x)][ids[0]] for x in (learner, peer)) if n else False
            if has_samples:
                li, pi = names.index(learner), names.index(peer)
                gate = 0
                for pid in ids:
                    ls, ps = per[li][pid]["samples"], per[pi][pid]["samples"]
                    gate += all(x < failure for x in ls) and any(x > success for x in ps)
                entry["sgt_gate_rate"] = gate / n
            pairs[f"{learner}<-{peer}"] = entry
    return {"n": n, "mean_single": mean_single, "any": any_, "exactly_one": exactly_one, "pairs": pairs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="Builtin models, comma-separated.")
    parser.add_argument("--tasks", default=",".join(DEFAULT_TASKS), help="Task names, comma-separated.")
    parser.add_argument("--limit", type=int, default=200, help="Test prompts per task (the first N).")
    parser.add_argument("--k", type=int, default=4, help="Samples per prompt for pass@K (0: greedy only).")
    parser.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature (the training one).")
    parser.add_argument("--max-new-tokens", type=int, default=8, help="Completion length for answer-line tasks.")
    parser.add_argument("--boxed-tokens", type=int, default=128, help="Completion length for boxed (paper) tasks.")
    parser.add_argument("--sample-boxed", action="store_true", help="Also sample K completions on boxed tasks.")
    parser.add_argument("--batch-size", type=int, default=20, help="Prompts per generation batch.")
    parser.add_argument("--seed", type=int, default=0, help="Sampling seed.")
    parser.add_argument("--out", type=Path, required=True, help="Output folder (real-pool-survey.json).")
    parser.add_argument("--resume", action="store_true", help="Keep the rows OUT/real-pool-survey.json already has.")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    # MUTUALRL_THREADS, else OMP_NUM_THREADS (the test suite gives each of its workers its share of the cores), else 2
    threads = os.environ.get("MUTUALRL_THREADS") or os.environ.get("OMP_NUM_THREADS", "").split(",")[0] or "2"
    torch.set_num_threads(int(threads))  # OpenMP's "4,2": 4 at the outer level
    tasks = [t for t in args.tasks.split(",") if t]
    start = time.perf_counter()
    names = args.models.split(",")
    loaded = {name: load_model(name) for name in names}
    models: dict = {name: {"chat_template": MODELS.get(name, False), "tasks": {}} for name in names}
    pool: dict = {}
    args.out.mkdir(parents=True, exist_ok=True)
    done_file = args.out / "real-pool-survey.json"
    earlier_settings: list = []  # the settings of the calls whose rows are kept (each row also has its lengths)
    if args.resume and done_file.exists():  # keep (model, task) rows an earlier run of this folder measured
        earlier = json.loads(done_file.read_text())
        for name in names:
            models[name]["tasks"].update(earlier["models"].get(name, {}).get("tasks", {}))
        earlier_settings = [*earlier.get("earlier_settings", []), earlier["settings"]]
    settings = {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                "torch_threads": torch.get_num_threads()}
    # Task by task, every model, then the pool numbers: partial results are written after each task.
    # Tasks kept from an earlier run of this folder get their pool numbers again (they are derived).
    kept = [t for t in models[names[0]]["tasks"] if t not in tasks and all(t in models[n]["tasks"] for n in names)]
    for task_name in kept + tasks:
        for name in names:
            if task_name in models[name]["tasks"]:
                continue
            models[name]["tasks"][task_name] = survey_task(name, models[name]["chat_template"], loaded[name],
                                                           task_name, args)
        if len(names) > 1:
            p = pool[task_name] = pool_numbers(models, task_name)
            gates = ", ".join(f"{k}: P(peer|fail) {v['peer_solves_given_learner_fails'] or 0:.2f} "
                              f"gate {v.get('sgt_gate_rate', float('nan')):.3f}" for k, v in p["pairs"].items())
            print(f"pool {task_name:16s} mean-single {p['mean_single']:.3f} any {p['any']:.3f} "
                  f"exactly-one {p['exactly_one']:.3f} | {gates}", flush=True)
        result = {"settings": settings, "earlier_settings": earlier_settings, "models": models, "pool": pool,
                  "wall_seconds": round(time.perf_counter() - start, 1)}
        (args.out / "real-pool-survey.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out / 'real-pool-survey.json'} ({round(time.perf_counter() - start, 1)} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

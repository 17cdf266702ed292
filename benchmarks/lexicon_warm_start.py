"""Warm-start a real model on one family of ``invented-lexicon`` (LoRA SFT), then score it per family.

The first stage of the real-model pool whose competences differ (benchmarks/results/learning-real-pool.md, where the
rule was written before any run): SmolLM2-135M-Instruct learns ``velish``, Gemma-3-270M ``ombric``. Seeded and
deterministic on a CPU (one torch thread); the adapter's files' sha256 are recorded.

    # one model and seed (minutes on one core); --eval-base also scores the untouched model once
    python benchmarks/lexicon_warm_start.py train --model smollm2-135m --family velish --seed 1 --out DIR
    python benchmarks/lexicon_warm_start.py train --model gemma3-270m --family ombric --seed 1 --out DIR
    # per-family accuracy, the acceptance rule and complementarity of the two models of each seed
    python benchmarks/lexicon_warm_start.py combine --seeds 1 --out DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

#: The pre-registered tries (benchmarks/results/learning-real-pool.md); a change is a new try, written before it runs.
TRIES = {
    1: {"lora_r": 16, "lora_alpha": 32, "lr": 2e-3, "warmup_steps": 10, "decay": False, "clip": None,
        "batch": 16, "steps": 150, "max_new_tokens": 6},
    2: {"lora_r": 16, "lora_alpha": 32, "lr": 2e-3, "warmup_steps": 10, "decay": True, "clip": 1.0,
        "batch": 16, "steps": 80, "max_new_tokens": 6},
}
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GAP = 0.3


def model_dir(name: str) -> Path:
    from mutualrl.assets.cache import asset_path

    return asset_path("models", name)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def encode_rows(tokenizer, rows) -> list[tuple[list[int], int]]:
    """(prompt ids + answer ids + eos, number of answer tokens) per row; the answer tokenized on its own, as a
    sampler continuing the prompt would emit it."""
    out = []
    for row in rows:
        prompt = tokenizer(row.prompt).input_ids
        answer = tokenizer(" " + row.answer, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        out.append((prompt + answer, len(answer)))
    return out


def answer_loss(model, batch: list[tuple[list[int], int]], pad_id: int):
    """Mean next-token NLL over the answer tokens; logits only where an answer token is predicted (the 262k-row
    head of Gemma over every position would cost as much as the body)."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(batch), width), dtype=torch.long)  # (B, T)
    rows, cols, targets = [], [], []
    for b, (ids, n_answer) in enumerate(batch):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        mask[b, : len(ids)] = 1
        for t in range(len(ids) - n_answer, len(ids)):  # the position t-1 predicts token t
            rows.append(b)
            cols.append(t - 1)
            targets.append(ids[t])
    causal_lm = model.get_base_model()
    hidden = causal_lm.model(input_ids=input_ids, attention_mask=mask).last_hidden_state  # (B, T, H)
    picked = hidden[torch.tensor(rows), torch.tensor(cols)]  # (N, H)
    logits = causal_lm.lm_head(picked).float()  # (N, V)
    cap = getattr(causal_lm.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap  # (N, V)
    return torch.nn.functional.cross_entropy(logits, torch.tensor(targets))


def learning_rate(recipe: dict, step: int) -> float:
    """Linear warm-up to ``lr``; then constant, or (``decay``) linear to 0 at the last step."""
    warm = min(1.0, (step + 1) / recipe["warmup_steps"])
    if not recipe["decay"] or step < recipe["warmup_steps"]:
        return recipe["lr"] * warm
    left = recipe["steps"] - step
    return recipe["lr"] * left / (recipe["steps"] - recipe["warmup_steps"] + 1)


def greedy_scores(model, tokenizer, rows, max_new_tokens: int):
    """A ModelEvalResult of greedy completions, one prompt at a time (no padding to shift positions)."""
    import torch

    from mutualrl.evaluation.results import ModelEvalResult, PromptResult
    from mutualrl.tasks import invented_lexicon as lexicon

    records = []
    with torch.no_grad():
        for row in rows:
            ids = torch.tensor([tokenizer(row.prompt).input_ids])  # (1, P)
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id
                                 or tokenizer.eos_token_id)  # (1, P + new)
            text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
            first = text.strip().splitlines()[0] if text.strip() else ""
            records.append(PromptResult(prompt_id=row.prompt_id, task=row.family, prompt=row.prompt,
                                        completion=text, answer=row.answer, extracted=first,
                                        score=lexicon.score(text, row.answer)))
    return ModelEvalResult(model="", records=records, split="test")


def held_out(limit: int | None = None):
    from mutualrl.tasks import invented_lexicon as lexicon

    tests = [lexicon.split(f)["test"][:limit] for f in lexicon.FAMILY_NAMES]
    return [row for pair in zip(*tests, strict=True) for row in pair]  # families alternate


def train(args) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mutualrl.tasks import invented_lexicon as lexicon

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    recipe = dict(TRIES[args.try_number])
    recipe["steps"] = args.steps or recipe["steps"]
    tokenizer = AutoTokenizer.from_pretrained(model_dir(args.model))
    model = AutoModelForCausalLM.from_pretrained(model_dir(args.model), dtype=torch.float32)
    test_rows = held_out(args.limit)
    if args.eval_base:
        started = time.time()
        base = greedy_scores(model, tokenizer, test_rows, recipe["max_new_tokens"])
        base.model, base.seconds = f"{args.model}-base", time.time() - started
        base.save(out / f"{args.model}-base-eval.json")
        print(f"base {args.model}: {base.reward_at_1_by_task()} ({base.seconds:.0f} s)", flush=True)
    config = LoraConfig(r=recipe["lora_r"], lora_alpha=recipe["lora_alpha"], lora_dropout=0.0,
                        target_modules=LORA_TARGETS, task_type="CAUSAL_LM")
    model = get_peft_model(model, config)
    encoded = encode_rows(tokenizer, lexicon.split(args.family)["train"])
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=recipe["lr"], weight_decay=0.0)
    sampler = random.Random(args.seed)
    started = time.time()
    losses = []
    for step in range(recipe["steps"]):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(recipe, step)
        batch = [encoded[sampler.randrange(len(encoded))] for _ in range(recipe["batch"])]
        loss = answer_loss(model, batch, tokenizer.pad_token_id or tokenizer.eos_token_id)
        optimizer.zero_grad()
        loss.backward()
        if recipe["clip"]:
            torch.nn.utils.clip_grad_norm_(params, recipe["clip"])
        optimizer.step()
        losses.append(round(loss.item(), 5))
        if step % 10 == 0 or step == recipe["steps"] - 1:
            print(f"{args.model} seed {args.seed} step {step}: loss {loss.item():.4f} "
                  f"({time.time() - started:.0f} s)", flush=True)
    train_seconds = time.time() - started
    model.eval()
    tag = f"{args.model}-{args.family}-seed{args.seed}"
    adapter = out / "adapters" / tag
    model.save_pretrained(adapter)
    digests = {p.name: sha256(p) for p in sorted(adapter.iterdir()) if p.is_file()}
    started = time.time()
    result = greedy_scores(model, tokenizer, test_rows, recipe["max_new_tokens"])
    result.model, result.seconds = tag, time.time() - started
    result.settings = {"recipe": recipe, "family": args.family, "seed": args.seed, "train_seconds": train_seconds,
                       "losses": losses, "adapter_sha256": digests, "threads": torch.get_num_threads()}
    result.save(out / f"{tag}-eval.json")
    print(f"{tag}: {result.reward_at_1_by_task()} (train {train_seconds:.0f} s, eval {result.seconds:.0f} s)")


def seed_verdict(strong: dict, weak_of: dict) -> dict:
    """The acceptance rule on one seed: each model's weak family >= GAP below its peer's score on it."""
    checks = {}
    for model, family in weak_of.items():
        peer = next(m for m in weak_of if m != model)
        gap = strong[peer][family] - strong[model][family]
        checks[f"{model} weak on {family}"] = {"own": strong[model][family], "peer": strong[peer][family],
                                               "gap": round(gap, 4), "met": gap >= GAP - 1e-9}
    return checks


def combine(args) -> None:
    from mutualrl.evaluation.complementarity import analyze
    from mutualrl.evaluation.results import ModelEvalResult

    out = Path(args.out)
    report = {"gap_rule": GAP, "seeds": {}}
    for seed in [int(s) for s in args.seeds.split(",")]:
        smol = ModelEvalResult.load(out / f"smollm2-135m-velish-seed{seed}-eval.json")
        gemma = ModelEvalResult.load(out / f"gemma3-270m-ombric-seed{seed}-eval.json")
        by_family = {r.model: r.reward_at_1_by_task() for r in (smol, gemma)}
        weak_of = {smol.model: "ombric", gemma.model: "velish"}
        checks = seed_verdict(by_family, weak_of)
        comp = analyze([smol, gemma])
        report["seeds"][seed] = {"recipe": smol.settings["recipe"], "accuracy": by_family, "checks": checks,
                                 "met": all(c["met"] for c in checks.values()),
                                 "complementarity_pairs": comp["pairs"], "pool": comp["pool"],
                                 "adapter_sha256": {r.model: r.settings["adapter_sha256"] for r in (smol, gemma)},
                                 "train_seconds": {r.model: round(r.settings["train_seconds"]) for r in (smol, gemma)}}
    for name in ("smollm2-135m", "gemma3-270m"):
        base = out / f"{name}-base-eval.json"
        if base.exists():
            report.setdefault("base", {})[name] = ModelEvalResult.load(base).reward_at_1_by_task()
    report["met_on_every_seed"] = all(s["met"] for s in report["seeds"].values())
    (out / "learning-real-pool.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "seeds"}, indent=1))
    for seed, s in report["seeds"].items():
        print(seed, s["accuracy"], {k: (c["gap"], c["met"]) for k, c in s["checks"].items()},
              [(p["learner"], p["peer"], p["peer_rescues_fail"]) for p in s["complementarity_pairs"]])


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch's first import (every function imports it late)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("train", help="warm-start one model on one family and score it on the held-out split")
    run.add_argument("--model", required=True, choices=["smollm2-135m", "gemma3-270m"], help="a cached smol model")
    run.add_argument("--family", required=True, choices=["velish", "ombric"], help="the family it learns")
    run.add_argument("--seed", type=int, required=True, help="warm-start seed (LoRA init and row sampling)")
    run.add_argument("--try", dest="try_number", type=int, default=max(TRIES), choices=sorted(TRIES),
                     help="the pre-registered try whose recipe to run (default: the latest)")
    run.add_argument("--steps", type=int, default=None, help="SFT steps (default: the try's; fewer for a smoke run)")
    run.add_argument("--limit", type=int, default=None, help="held-out prompts per family (default: all 100)")
    run.add_argument("--eval-base", action="store_true", help="also score the untouched model first")
    run.add_argument("--out", required=True, help="folder for eval files and adapters")
    both = sub.add_parser("combine", help="per-family accuracy, the rule and complementarity per seed")
    both.add_argument("--seeds", required=True, help="comma-separated warm-start seeds")
    both.add_argument("--out", required=True, help="the folder the train runs wrote")
    args = parser.parse_args(argv)
    (train if args.command == "train" else combine)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

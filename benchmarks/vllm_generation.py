"""GRPO rollout generation on the CPU: vLLM (CPU build) against transformers ``generate``, same run.

For each model of a pool: the same prompts (the pool's task, test split, as each policy tokenizes
them), each repeated K times as TRL's colocate mode sends them (one row per completion), sampled
at temperature 1 for exactly T new tokens on both sides (EOS ignored, so both do the same work).
transformers: one left-padded ``generate`` call, as TRL's transformers path makes. vLLM: the
engine TRL's colocate mode builds (``external_launcher`` is replaced by vLLM's in-process
executor here; same CPU kernels), in the model's dtype, eager unless ``--compile``. One untimed
warm-up call per backend, then the median of ``--repeats`` timed calls; both backends on the same
torch thread count. Engine start-up (``vllm.LLM(...)``) is reported separately.

``ratio = transformers_s / vllm_s`` (> 1: vLLM is faster). Prints one JSON line per case::

    PYTHONPATH=src python benchmarks/vllm_generation.py --pool tiny
    PYTHONPATH=src python benchmarks/vllm_generation.py --pool smol --k 4 8 --new-tokens 8 32

vLLM changes process-global state (torch.set_num_threads becomes a no-op), so this runs in its
own process; for each case the two backends' calls alternate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def pool_models(pool: str) -> tuple[list[tuple[str, str, bool]], str]:
    """(policy, model, chat template) for each policy of a pool recipe, and the pool's task."""
    from mutualrl.config.loader import load_run_config

    config = load_run_config(pool).config
    return [(p.name, p.model, bool(p.chat_template)) for p in config.pool.policies], config.task.name


def prompt_ids(tokenizer, task: str, n: int, chat: bool) -> list[list[int]]:
    from mutualrl.evaluation.generate import prompt_token_ids
    from mutualrl.tasks.registry import get_task

    examples = get_task(task).load("test", "offline", limit=n)
    return [prompt_token_ids(tokenizer, ex.prompt, chat) for ex in examples]


def time_pair(first, second, repeats: int) -> tuple[float, float]:
    """Median seconds of each of two calls, alternated (one untimed warm-up each), so load hits both alike."""
    first(), second()
    a, b = [], []
    for _ in range(repeats):
        for fn, out in ((first, a), (second, b)):
            started = time.perf_counter()
            fn()
            out.append(time.perf_counter() - started)
    return statistics.median(a), statistics.median(b)


def hf_generate(model, tokenizer, prompts: list[list[int]], k: int, new_tokens: int):
    import torch

    from mutualrl.padding import pad_token_rows

    rows = [ids for ids in prompts for _ in range(k)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids, mask = pad_token_rows(rows, pad, side="left")

    def run():
        with torch.no_grad():
            model.generate(input_ids=input_ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                           max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=pad)

    return run


def vllm_generate(llm, prompts: list[list[int]], k: int, new_tokens: int):
    from vllm import SamplingParams

    params = SamplingParams(n=1, temperature=1.0, max_tokens=new_tokens, min_tokens=new_tokens, ignore_eos=True,
                            detokenize=False, logprobs=0)
    batch = [{"prompt_token_ids": ids} for ids in prompts for _ in range(k)]
    return lambda: llm.generate(batch, params, use_tqdm=False)


def bench_model(policy: str, model_ref: str, chat: bool, task: str, args) -> list[dict]:
    import torch

    from mutualrl.host.vllm_cpu import KV_ENV, kv_cache_gib
    from mutualrl.pools.loading import load_model, load_tokenizer_for, resolve_model_path

    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer_for(model_ref)
    model = load_model(model_ref, device="cpu").eval()
    prompts = prompt_ids(tokenizer, task, args.prompts, chat)
    cases = [(k, t) for k in args.k for t in args.new_tokens]

    from vllm import LLM

    longest = max(len(p) for p in prompts) + max(args.new_tokens)
    limit = getattr(getattr(model.config, "text_config", None) or model.config, "max_position_embeddings", 512)
    max_len = min(max(longest, 512), limit)
    os.environ[KV_ENV] = str(kv_cache_gib(model.config, len(prompts) * max(args.k), longest, max_len))
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    started = time.perf_counter()
    llm = LLM(model=str(resolve_model_path(model_ref)), dtype=dtype, enforce_eager=not args.compile, seed=0,
              max_model_len=max_len, max_num_seqs=len(prompts) * max(args.k), max_num_batched_tokens=4096,
              logprobs_mode="processed_logprobs")
    start_s = time.perf_counter() - started
    out = []
    for k, t in cases:
        hf, v = time_pair(hf_generate(model, tokenizer, prompts, k, t), vllm_generate(llm, prompts, k, t), args.repeats)
        out.append({"pool": args.pool, "policy": policy, "params": sum(p.numel() for p in model.parameters()),
                    "dtype": dtype, "prompts": len(prompts), "k": k, "new_tokens": t, "threads": args.threads,
                    "transformers_s": round(hf, 3), "vllm_s": round(v, 3), "ratio": round(hf / v, 2),
                    "vllm_engine_start_s": round(start_s, 1), "vllm_compile": args.compile})
        print(json.dumps(out[-1]), flush=True)
    del llm
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default="tiny", help="Pool recipe whose models and task are used.")
    parser.add_argument("--policy", default=None, help="Only this policy of the pool (default: each, one process each).")
    parser.add_argument("--prompts", type=int, default=8, help="Distinct prompts per generation.")
    parser.add_argument("--k", type=int, nargs="+", default=[4, 8], help="Completions per prompt (GRPO's K).")
    parser.add_argument("--new-tokens", type=int, nargs="+", default=[8, 32], help="New tokens per completion.")
    parser.add_argument("--repeats", type=int, default=3, help="Timed calls per case and backend (median).")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads, both backends.")
    parser.add_argument("--compile", action="store_true", help="Let vLLM torch.compile its model (default: eager).")
    args = parser.parse_args(argv)
    models, task = pool_models(args.pool)
    if args.policy is None:  # one engine per process, as in training
        import subprocess

        failed = []
        for policy, _, _ in models:  # the child prints its JSON lines as each case finishes
            done = subprocess.run([sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]),
                                   "--policy", policy], stderr=subprocess.PIPE, text=True)
            if done.returncode != 0:
                failed.append(policy)
                print(json.dumps({"pool": args.pool, "policy": policy, "error": done.stderr.strip()[-600:]}), flush=True)
        return 1 if failed else 0
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine, as in colocate mode
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    policy, model_ref, chat = next(m for m in models if m[0] == args.policy)
    bench_model(policy, model_ref, chat, task, args)  # prints one JSON line per case
    return 0


if __name__ == "__main__":
    sys.exit(main())

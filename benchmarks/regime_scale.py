"""The regimes' host (CPU) work of one step at the paper's sizes, per rank, against an estimate of its GPU time.

Paper sizes per policy and step: 1024 prompts x 5 rollouts, responses of 256-3072 tokens (uniform, mean 1664:
about 8.5 M tokens), M = 2 and 4 policies, R = 1, 2 or 4 ranks per policy. Each rank holds whole prompt groups
of its own rows (``StepRollouts.local_rows``, ``require_whole_groups``): 5120 / R rows.

Timed with the functions the adapters call, in their order, on rows cut from THL's built-in corpus and encoded by
a real tokenizer pair (the peer's, then the learner's: ``qwen3 -> phi3``, ``llama3 -> mistral-sp``):

- ``decode`` + ``publish`` (the build): this rank's records: ``thl.batch_decode_with_spans`` of its generated ids
  (spans too: only PRP's trace corrections need them, so an over-count for the others), then a ``RolloutBatch`` and
  ``ExperienceExchange.publish`` (Arrow IPC, fsync, checksum) -- every regime with records;
- ``read``: one peer's round read with the regime's columns (``ExperienceExchange.read``, checksum verified, rows
  checked: a fresh reader each time, as each regime's worker reads a round once) and laid out as groups (``regimes.core.peers.gather_peer_groups``); every rank reads a peer's whole round;
- ``retokenize``: this rank's peer rows as learner token rows (``regimes.core.peers.learner_responses``);
- ``align``: their behaviour log-probs aligned onto those tokens (PRP's own
  ``regimes/prp/adapter.py::PRPAdapter._aligned_traces``: zero-copy views of the peer's spans and log-probs,
  ``thl.align_logprobs``).

Per regime and rank: standalone-with-records = build; XGRPO = build + (M-1) read; SGT = build + (M-1) read +
retokenize of at most one rescue per prompt (5120 / R / 5 rows, every prompt gated: the upper bound);
PRP learner = build + (M-1) (read + retokenize of every peer row); PRP peer = PRP learner + (M-1) align.

Linear scaling is checked, not assumed: every stage is timed on ``--sizes`` rows (median of ``--repeats``; the
largest, 1280, is a whole rank's rows with 4 ranks per policy) and the exponent of its time in tokens between the
smallest and the largest size (1: linear, 2: quadratic) must be at most ``--max-exponent`` (for every stage taking
0.1 s or more at the largest size) before its time per token at the largest size is extrapolated to a rank's rows
(a read, memory-mapped and nearly constant, is then over-counted).
PRP's token-ratio p99 (``regimes.core.rank_metrics.Quantile``, a bounded sketch per rank) is timed at the paper's size
itself (``quantile`` in the JSON: per M and ranks, the sketch's seconds and bytes against sending and sorting every
value, as before); ``--quantile-only`` times only that.
Tokenizers run as a worker runs them (``TOKENIZERS_PARALLELISM=false``: one core) unless ``--threads 2`` (Rayon on
2 threads)::

    nice -n 5 python benchmarks/regime_scale.py --out DIR/regime-scale-1core.json
    nice -n 5 python benchmarks/regime_scale.py --threads 2 --out DIR/regime-scale-2cores.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

PROMPTS, ROLLOUTS, MIN_LEN, MAX_LEN = 1024, 5, 256, 3072
ROWS = PROMPTS * ROLLOUTS
PAIRS = (("qwen3", "phi3"), ("llama3", "mistral-sp"))
READ_COLUMNS = {  # the regimes' peer_columns (regimes/<name>/adapter.py)
    "xgrpo": ("prompt_id", "sample_index", "reward"),
    "sgt": ("prompt_id", "sample_index", "reward", "response_text", "finished", "num_tokens"),
    "prp-learner": ("prompt_id", "sample_index", "reward", "response_text", "finished"),
    "prp-peer": ("prompt_id", "sample_index", "reward", "response_text", "finished", "response_token_spans",
                 "behaviour_logps"),
}

# The GPU step's estimate (its arithmetic and the MFUs' reasons: benchmarks/results/regime-scale.md).
PARAMS = 1.54e9  # Qwen2.5-Math-1.5B / Qwen3-1.7B class, the paper's pools
H100_BF16 = 989e12  # dense bf16 peak, FLOP/s
MFU_GENERATION, MFU_TRAINING = 0.15, 0.40  # optimistic (a short GPU step makes the 5 % target strict)


def estimate(policies: int, ranks: int, regime: str) -> dict:
    """One rank's GPU seconds of a paper step (one H100 per rank; 4 ranks per policy on an 8-GPU node)."""
    tokens = ROWS * (MIN_LEN + MAX_LEN) / 2 / ranks  # this rank's generated tokens
    trained = tokens * (policies if regime.startswith("prp") else 1)  # PRP trains on the peers' rows too
    generation = 2 * PARAMS * tokens  # decode: 2 FLOPs per weight per token (attention over ~1k context: +6 %)
    training = 8 * PARAMS * trained  # forward + backward 6N, the reference model's forward 2N
    seconds = generation / (MFU_GENERATION * H100_BF16) + training / (MFU_TRAINING * H100_BF16)
    return {"tokens_per_rank": tokens, "generation_flops": generation, "training_flops": training, "gpu_s": seconds}


def rows_of(tokenizer, corpus: list[str], n: int, seed: int) -> list[list[int]]:
    """``n`` generated responses: windows of 256-3072 ids of the corpus as the policy's tokenizer encodes it."""
    from mutualrl.thl import retokenize

    rng = np.random.default_rng(seed)
    pool = retokenize(tokenizer, ["\n\n".join(corpus[j] for j in rng.permutation(len(corpus)))])[0].ids
    pool = list(pool) * (MAX_LEN // max(len(pool), 1) + 2)
    lengths = rng.integers(MIN_LEN, MAX_LEN + 1, size=n)
    starts = rng.integers(0, len(pool) - MAX_LEN, size=n)
    return [pool[s:s + n_] for s, n_ in zip(starts.tolist(), lengths.tolist(), strict=True)]


def records(policy: str, decoded: list, ids: list[list[int]], step: int):
    """The rank's ``RolloutBatch`` as ``RegimeAdapter.build_records`` makes it, with seeded rewards and log-probs."""
    from mutualrl.see.records import RolloutBatch

    n = len(ids)
    rng = np.random.default_rng(step)
    return RolloutBatch(
        prompt_id=[f"p{i // ROLLOUTS}" for i in range(n)],
        sample_index=[i % ROLLOUTS for i in range(n)], prompt_text=[f"prompt {i // ROLLOUTS}" for i in range(n)],
        response_text=[d.text for d in decoded], response_token_ids=ids,
        response_token_spans=[d.spans for d in decoded], reward=rng.integers(0, 2, n).astype(np.float32),
        advantage=rng.normal(size=n).astype(np.float32),
        behaviour_logps=[-rng.uniform(0, 8, len(r)).astype(np.float32) for r in ids],
        finished=[True] * n,
    )


def stages(peer_tok, learner_tok, ids: list[list[int]], root: Path, step: int) -> dict[str, float]:
    """Seconds of each stage on these rows (the peer builds and publishes, the learner reads, retokenizes, aligns)."""
    from mutualrl.regimes.core.peer_responses import learner_responses
    from mutualrl.regimes.core.peers import gather_peer_groups
    from mutualrl.regimes.prp.adapter import PRPAdapter
    from mutualrl.see import ExperienceExchange
    from mutualrl.thl import batch_decode_with_spans

    def exchange_of(policy: str) -> ExperienceExchange:
        return ExperienceExchange(root / f"see-{step}", run_id="scale", policy=policy, policies=["peer", "learner"])

    out: dict[str, float] = {}
    clock = time.perf_counter()
    decoded = batch_decode_with_spans(peer_tok, ids)
    out["decode"] = time.perf_counter() - clock
    clock = time.perf_counter()
    exchange_of("peer").publish(step, records("peer", decoded, ids, step))
    out["publish"] = time.perf_counter() - clock
    prompts = sorted({f"p{i // ROLLOUTS}" for i in range(len(ids))}, key=lambda p: int(p[1:]))
    for regime, columns in READ_COLUMNS.items():
        clock = time.perf_counter()
        table = exchange_of("learner").read(step, "peer", columns=columns)  # a fresh reader checks the rows
        gather_peer_groups({"peer": table}, ["peer"], prompts, ROLLOUTS, step)
        out[f"read:{regime}"] = time.perf_counter() - clock
    sources = [("peer", row) for row in range(len(ids))]
    clock = time.perf_counter()
    responses = learner_responses({"peer": table}, sources, learner_tok, None)
    out["retokenize"] = time.perf_counter() - clock
    clock = time.perf_counter()
    PRPAdapter._aligned_traces(None, {"peer": table}, sources, responses.texts, responses.finished,  # self unused
                               responses.spans, responses.ids)
    out["align"] = time.perf_counter() - clock
    return out


def measure_pair(peer: str, learner: str, sizes: list[int], repeats: int, root: Path) -> dict:
    """Per stage: seconds per token at each size (median of ``repeats``), and the tokens of each size."""
    from mutualrl.assets.tokenizers import load_tokenizer
    from mutualrl.thl.corpus import builtin_corpus
    from mutualrl.thl.retokenize import continuation_encoder
    from mutualrl.thl.spans import byte_table

    peer_tok, learner_tok = load_tokenizer(peer), load_tokenizer(learner)
    for tok in (peer_tok, learner_tok):  # built once per process (a worker's first step)
        byte_table(tok)
        continuation_encoder(tok)
    corpus = builtin_corpus()
    stages(peer_tok, learner_tok, rows_of(peer_tok, corpus, 10, 99), root, 0)  # warm-up
    per_size = []
    for size in sizes:
        ids = rows_of(peer_tok, corpus, size, size)
        tokens = sum(len(r) for r in ids)
        runs = [stages(peer_tok, learner_tok, ids, root, 1 + len(per_size) * repeats + k) for k in range(repeats)]
        per_size.append({"rows": size, "tokens": tokens,
                         "s_per_token": {s: statistics.median(r[s] for r in runs) / tokens for s in runs[0]}})
    return {"peer": peer, "learner": learner, "sizes": per_size}


def per_rank(rate: dict[str, float], regime: str, policies: int, ranks: int) -> dict[str, float]:
    """One rank's host seconds of a paper step for ``regime``, per stage, from the stages' seconds per token."""
    mean_tokens = (MIN_LEN + MAX_LEN) / 2
    own = ROWS / ranks * mean_tokens  # this rank's rows
    whole = ROWS * mean_tokens  # a peer's whole round, read by every rank
    peers = policies - 1
    seconds = {"decode": rate["decode"] * own, "publish": rate["publish"] * own}  # build_records + publish
    if regime != "standalone":
        seconds["read"] = peers * rate[f"read:{regime}"] * whole
    if regime == "sgt":  # at most one rescue per prompt of this rank
        seconds["retokenize"] = rate["retokenize"] * own / ROLLOUTS
    elif regime.startswith("prp"):
        seconds["retokenize"] = peers * rate["retokenize"] * own
        if regime == "prp-peer":
            seconds["align"] = peers * rate["align"] * own
    return seconds


def quantile_cost(policies: int, ranks: int, threads: int, scale: float = 1.0) -> dict:
    """PRP's ``token_ratio_p99`` of one paper step for one rank, timed at the paper's size (not extrapolated): the
    sketch of the rank's peer-token ratios, the bytes it sends (``rank_metrics.parts``, pickled as
    ``gather_object`` pickles), the merge of every rank's sketch; and as it was before the sketch: 8 bytes per
    value sent, and every rank sorting all ranks' values. Torch on ``threads`` threads (a worker's own); ``scale``
    of the paper's values (a smoke test's)."""
    import pickle

    import torch

    torch.set_num_threads(threads)
    from mutualrl.regimes.core.rank_metrics import Quantile
    from mutualrl.training.trl_metrics import combine, parts

    n = int(ROWS / ranks * (policies - 1) * (MIN_LEN + MAX_LEN) / 2 * scale)  # this rank's peer tokens
    generator = torch.Generator().manual_seed(n)
    ratios = torch.exp(0.5 * torch.randn(n, generator=generator, dtype=torch.float64))  # [n]
    clock = time.perf_counter()
    sent = pickle.dumps(parts({"token_ratio_p99": Quantile(ratios, 0.99)}))
    sketch_s = time.perf_counter() - clock
    clock = time.perf_counter()
    combine([pickle.loads(sent) for _ in range(ranks)])
    merge_s = time.perf_counter() - clock
    clock = time.perf_counter()
    torch.sort(ratios.repeat(ranks))  # [ranks x n]: what each rank sorted before
    before_sort_s = time.perf_counter() - clock
    return {"M": policies, "ranks": ranks, "values_per_rank": n, "sketch_s": round(sketch_s, 3),
            "merge_s": round(merge_s, 4), "sent_bytes": len(sent), "before_sent_bytes": 8 * n,
            "before_sort_s": round(before_sort_s, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="160,640,1280",
                        help="rows timed per stage, multiples of 5 (>= 2 sizes: the linearity check)")
    parser.add_argument("--repeats", type=int, default=2, help="timings per size (median)")
    parser.add_argument("--threads", type=int, default=1, help="tokenizer threads (1: as a worker runs them)")
    parser.add_argument("--max-exponent", type=float, default=1.15,
                        help="largest growth exponent of a stage's time in tokens that counts as linear")
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the result")
    parser.add_argument("--quantile-scale", type=float, default=1.0,
                        help="share of the paper's token ratios the quantile timing uses (1: the paper's size)")
    parser.add_argument("--quantile-only", action="store_true",
                        help="time only PRP's token-ratio p99 at the paper's size (no tokenizer, no exchange)")
    args = parser.parse_args()
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if args.threads > 1 else "false"
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    sizes = [int(s) // ROLLOUTS * ROLLOUTS or ROLLOUTS for s in args.sizes.split(",")]  # whole prompt groups
    result: dict = {"date": time.strftime("%Y-%m-%d"), "cpu_count": os.cpu_count(), "threads": args.threads,
                    "loadavg_before": os.getloadavg(), "pairs": [], "table": [], "quantile": []}
    for policies in (2, 4):
        for ranks in (1, 2, 4):
            result["quantile"].append(quantile_cost(policies, ranks, args.threads, args.quantile_scale))
            print(json.dumps(result["quantile"][-1]), flush=True)
    with tempfile.TemporaryDirectory(prefix="regime-scale-") as root:
        for peer, learner in () if args.quantile_only else PAIRS:
            measured = measure_pair(peer, learner, sizes, args.repeats, Path(root))
            small, large = measured["sizes"][0], measured["sizes"][-1]
            growth = math.log(large["tokens"] / small["tokens"])
            exponent = {s: math.log(large["s_per_token"][s] * large["tokens"]
                                    / (small["s_per_token"][s] * small["tokens"])) / growth
                        for s in small["s_per_token"]}
            measured["exponent"] = exponent
            result["pairs"].append(measured)
            print(json.dumps({"pair": f"{peer}->{learner}", "exponent": exponent}), flush=True)
            # a stage under 0.1 s at the largest size (the reads: memory-mapped) is within a loaded box's noise
            checked = {s: e for s, e in exponent.items() if large["s_per_token"][s] * large["tokens"] >= 0.1}
            measured["checked"] = sorted(checked)
            if max(checked.values(), default=0.0) > args.max_exponent:  # none checked: all too quick to grow
                print(f"a stage grows faster than linearly (exponent > {args.max_exponent}): not extrapolated",
                      flush=True)
                continue
            rate = large["s_per_token"]
            for regime in ("standalone", "xgrpo", "sgt", "prp-learner", "prp-peer"):
                for policies in (2, 4):
                    for ranks in (1, 2, 4):
                        stage_s = per_rank(rate, regime, policies, ranks)
                        host, gpu = sum(stage_s.values()), estimate(policies, ranks, regime)["gpu_s"]
                        row = {"pair": f"{peer}->{learner}", "regime": regime, "M": policies, "ranks": ranks,
                               "host_s_per_rank": round(host, 2), "gpu_s_per_rank": round(gpu, 1),
                               "ratio": round(host / gpu, 4), "stages_s": {k: round(v, 2) for k, v in stage_s.items()}}
                        result["table"].append(row)
                        print(json.dumps(row), flush=True)
    result["gpu_estimate"] = {"params": PARAMS, "peak_flops": H100_BF16, "mfu_generation": MFU_GENERATION,
                              "mfu_training": MFU_TRAINING,
                              "per_rank": {f"M{m}-R{r}-{g}": estimate(m, r, g) for m in (2, 4) for r in (1, 2, 4)
                                           for g in ("standalone", "prp")}}
    result["loadavg_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

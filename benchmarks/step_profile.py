"""Where one training step's time goes, per policy of a real ``mutualrl train`` run (issue 40), and its MFU.

Runs ``mutualrl train`` unchanged, with ``benchmarks/step_profile_hook.py`` loaded into the policy
processes (a generated ``sitecustomize.py``; nothing in ``src/`` changes), and splits each optimizer
step into: generation, vLLM's weight sync, reward, old/reference log-probs (and the behaviour log-probs PRP
scores before publishing, which the trainer counts in ``mutual/build_s``), SEE publish/read, barrier wait, regime work
(THL and the regime's transform, PRP's peer scoring, SGT's extra forward), forward+backward, optimizer,
and what is left (``rollout_other``: batching, advantages; ``other``: scheduler, zero_grad, callbacks).
The SEE, wait and regime figures are the trainer's own ``mutual/*_s`` rows of ``RUN/metrics.jsonl``;
validation is ``eval/seconds`` / ``eval/n`` (per prompt; outside the step). Peak memory is each policy
process's ``VmHWM`` (and CUDA's peak allocation on a GPU). The first step (warm-up: THL tables, first
allocations) is reported but left out of the medians when there are two steps or more::

    python benchmarks/step_profile.py --pool tiny --regime sgt --steps 3 --out DIR
    python benchmarks/step_profile.py --pool smol-arith --regime sgt --steps 2 --validation-limit 8 --out DIR

FLOPs (counted from the shapes of every ``_get_per_token_logps_and_entropies`` call of the step; TRL
1.16's fused LM head, ``trl/trainer/utils.py::add_fused_lm_head`` and ``kernels/chunked_logprob.py``).
One pass over ``R`` rows of padded length ``S`` (``T = R*S`` positions) with ``M`` scored positions::

    body_fwd = 2 * (N_frozen + N_trainable) * T          N_*: weights of every Linear/Conv1D but the LM head
                                                          (LoRA: the frozen base_layer in N_frozen, lora_A/B in
                                                          N_trainable; they run on every position)
    attn_fwd = 4 * R * S^2 * d_attn * L                   QK^T and AV, full S^2 (CPU SDPA/eager skip nothing)
    head_fwd = 2 * h * V * M                              the real vocabulary V; M = the rows the head projected
                                                          (counted): R*(S-1) with TRL on a CPU, the completion
                                                          tokens on CUDA/XPU with Triton, those and fillers with
                                                          mutualrl on a CPU (host/trl_cpu_lm_head_patch.py; its weight
                                                          gradient spans R*(S-1) rows, counted as M here)
    backward = 2*(N_frozen+N_trainable)*T + 2*N_trainable*T     input gradients through the frozen base too,
                                                                 weight gradients of trainable weights only
             + 2 * attn_fwd
             + 2*h*V*M * (2 + head_trainable)             the chunked head recomputes its logits, then input
                                                          gradient (+ weight gradient when the head trains)
             + body_fwd + attn_fwd if gradient checkpointing

The input gradient of the first layer's input projections is counted though autograd skips it (the
embedding output needs no gradient): an over-count of at most one layer's q/k/v input gradient.
MFU = FLOPs of the passes with grad (the GRPO loss and SGT's extra loss) / (training_step -
_prepare_inputs) / matmul rate, the rate measured in the same run after training, in fp32, with the
policy's thread count, on the step's GEMM shapes: ``[T, h] @ [h, h]`` and ``[min(M, 4096), h] @ [h, c]``
(TRL's token tile; ``c``: TRL's 32768-column vocabulary tile, narrowed so one GEMM stays near 1 GFLOP),
combined in the step's FLOP proportions (body and attention at the first rate, the head at the second).
``mfu_forward_backward_completion_head`` is the same with ``M`` = completion tokens: the work the loss
needs, where the CPU path of the fused head does ``head_scored_per_completion_token`` times more.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("generation", "weight_sync", "reward", "old_ref_logps", "see_publish_read", "barrier_wait", "regime",
         "forward_backward", "optimizer")
RESIDUALS = ("rollout_other", "other")
TOKEN_TILE = 4096  # trl.kernels.chunked_logprob.TOKEN_CHUNK_SIZE
VOCAB_TILE = 32768  # trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE


# -- FLOPs and MFU (pure arithmetic: tests/test_step_profile_bench.py checks it by hand) -------------
def pass_flops(model: dict[str, Any], rows: int, length: int, scored: int, grad: bool) -> dict[str, float]:
    """FLOPs of one log-prob pass, split body / attention / head (the formula in the module docstring)."""
    n_all = model["linear_frozen"] + model["linear_trainable"]
    tokens = rows * length
    body = 2.0 * n_all * tokens
    attn = 4.0 * rows * length**2 * model["attn_width"] * model["layers"]
    head = 2.0 * model["hidden"] * model["vocab"] * scored
    if not grad:
        return {"body": body, "attn": attn, "head": head}
    backward_body = 2.0 * n_all * tokens + 2.0 * model["linear_trainable"] * tokens
    recompute = (body, attn) if model.get("gradient_checkpointing") else (0.0, 0.0)
    return {"body": body + backward_body + recompute[0], "attn": attn + 2 * attn + recompute[1],
            "head": head + head * (2 + int(model["head_trainable"]))}


def step_flops(model: dict[str, Any], passes: list[dict[str, Any]], grad: bool) -> dict[str, float]:
    """Summed FLOPs of the step's passes with (``grad=True``) or without gradient."""
    total = {"body": 0.0, "attn": 0.0, "head": 0.0}
    for p in passes:
        if bool(p["grad"]) == grad:
            for key, value in pass_flops(model, p["rows"], p["length"], p["scored"], grad).items():
                total[key] += value
    return total


def effective_rate(flops: dict[str, float], rates: dict[str, float]) -> float:
    """FLOP/s the measured GEMMs would give on this mix: body and attention at ``hh``, the head at ``hv``."""
    square = flops["body"] + flops["attn"]
    seconds = square / rates["hh"] + flops["head"] / rates["hv"]
    return (square + flops["head"]) / seconds if seconds > 0 else float("nan")


def mfu(flops: dict[str, float], seconds: float, rates: dict[str, float]) -> float:
    """Model FLOPs of the step's passes / their time / the measured matmul rate."""
    total = sum(flops.values())
    return total / seconds / effective_rate(flops, rates) if seconds > 0 and total > 0 else float("nan")


# -- the split of one step ---------------------------------------------------------------------------
def breakdown(step: dict[str, Any], metrics: dict[str, Any]) -> dict[str, float]:
    """Seconds per part of one step: the hook's ``step`` line and the trainer's metrics row of that step."""
    trl, m = step.get("trl", {}), metrics
    get = lambda key: float(m.get(key) or 0.0)  # noqa: E731 - a regime that does not exchange logs none
    prepare = step.get("prepare_inputs_s", 0.0)
    behaviour = sum(p["seconds"] for p in step.get("logps", []) if p["phase"] == "behaviour")  # inside build_s
    parts = {
        "generation": sum(v for k, v in trl.items() if k.startswith(("transformers.generate", "vLLM.generate"))),
        "weight_sync": trl.get("sync_weights", 0.0),  # vLLM colocate: the trainer's weights into the engine
        "reward": trl.get("_calculate_rewards", 0.0),
        "old_ref_logps": behaviour + sum(p["seconds"] for p in step.get("logps", []) if p["phase"] == "rollout"),
        "see_publish_read": get("mutual/build_s") - behaviour + get("mutual/publish_s") + get("mutual/read_s"),
        "barrier_wait": get("mutual/wait_s"),
        "regime": get("mutual/transform_s") + step.get("extra_loss_s", 0.0),
        "forward_backward": step.get("training_step_s", 0.0) - prepare - step.get("extra_loss_s", 0.0),
        "optimizer": step.get("optimizer_s", 0.0),
    }
    in_rollout = ("generation", "weight_sync", "reward", "old_ref_logps", "see_publish_read", "barrier_wait")
    parts["rollout_other"] = prepare - sum(parts[k] for k in in_rollout) - get("mutual/transform_s")
    parts["other"] = step["step_s"] - step.get("training_step_s", 0.0) - parts["optimizer"]
    parts["step"] = step["step_s"]
    return parts


def coverage(parts: dict[str, float]) -> float:
    """Measured parts (no residuals) / step time: 1.0 when nothing of the step went unmeasured."""
    return sum(parts[k] for k in PARTS) / parts["step"]


# -- running and reading -----------------------------------------------------------------------------
def run_pool(pool: str, regime: str, steps: int, out: Path, validation_limit: int, sets: list[str]) -> dict:
    """``mutualrl train`` with the hook armed; returns the command, run folder, profile folder and seconds."""
    site = out / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import sys\nsys.path.insert(0, %r)\nimport step_profile_hook\nstep_profile_hook.install()\n"
        % str(ROOT / "benchmarks"))
    run_dir, profile = out / f"run-{pool}-{regime}", out / f"profile-{pool}-{regime}"
    for folder in (run_dir, profile):
        if folder.exists():
            raise SystemExit(f"{folder} exists: give a fresh --out")
    argv = [sys.executable, "-m", "mutualrl", "train", "--pool", pool, "--regime", regime,
            "--max-steps", str(steps), "--output-dir", str(run_dir), "--set", f"validation.limit={validation_limit}"]
    for item in sets:
        argv += ["--set", item]
    inherited = os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), str(site), inherited) if p),
           "MUTUALRL_STEP_PROFILE_OUT": str(profile), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    started, load_before = time.perf_counter(), os.getloadavg()
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"mutualrl train failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return {"argv": argv[1:], "run_dir": run_dir, "profile": profile, "seconds": time.perf_counter() - started,
            "loadavg_1_5_15": {"before": load_before, "after": os.getloadavg()}}  # others' work on a shared box


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def policy_profile(name: str, rows: list[dict[str, Any]], metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """One policy's steps, split, with FLOPs; medians over the steps after the first (all with one step)."""
    model = next(r for r in rows if r["kind"] == "model")
    train = {r["step"]: r for r in metrics if r.get("kind") == "train" and r.get("policy") == name}
    steps = []
    for row in (r for r in rows if r["kind"] == "step"):
        parts = breakdown(row, train.get(row["step"], {}))
        steps.append({"step": row["step"], "parts": parts, "coverage": coverage(parts),
                      "train_s": row.get("training_step_s", 0.0) - row.get("prepare_inputs_s", 0.0),
                      "flops_train": step_flops(model, row["logps"], grad=True),
                      "flops_rollout": step_flops(model, row["logps"], grad=False),
                      "peak_rss_mib": row["peak_rss_mib"], "peak_cuda_mib": row.get("peak_cuda_mib"),
                      "passes": row["logps"]})
    used = steps[1:] if len(steps) > 1 else steps
    evals = [r for r in metrics if r.get("kind") == "eval" and r.get("policy") == name and r.get("eval/n")]
    median = {k: statistics.median(s["parts"][k] for s in used) for k in (*PARTS, *RESIDUALS, "step")}
    return {"model": model, "steps": steps, "steps_in_median": [s["step"] for s in used], "median_s": median,
            "peak_rss_mib": max(s["peak_rss_mib"] for s in steps),
            "validation_s_per_prompt": (sum(r["eval/seconds"] for r in evals) / sum(r["eval/n"] for r in evals)
                                        if evals else None)}


# -- the matmul rate ---------------------------------------------------------------------------------
def gemm_rate(rows: int, inner: int, cols: int, threads: int, min_seconds: float = 0.5) -> float:
    """fp32 FLOP/s of ``[rows, inner] @ [inner, cols]`` on this box with ``threads`` threads (best of repeats)."""
    import torch

    torch.set_num_threads(threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # where the policies trained (not tried on a GPU yet)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    a, b = torch.randn(rows, inner, device=device), torch.randn(inner, cols, device=device)
    out = torch.empty(rows, cols, device=device)
    torch.mm(a, b, out=out)  # first touch
    best, spent = float("inf"), 0.0
    while spent < min_seconds or best == float("inf"):
        sync()
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        sync()
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
    return 2.0 * rows * inner * cols / best


def measured_rates(model: dict[str, Any], passes: list[dict[str, Any]]) -> dict[str, Any]:
    """The box's fp32 GEMM rates on the step's shapes (module docstring), with the policy's thread count."""
    train = [p for p in passes if p["grad"]] or passes
    tokens = max(p["rows"] * p["length"] for p in train)
    scored = min(TOKEN_TILE, max(p["scored"] for p in train))
    h, threads = model["hidden"], model["torch_threads"]
    cols = max(1024, min(VOCAB_TILE, model["vocab"], int(1e9 / (2 * scored * h))))
    return {"hh": gemm_rate(tokens, h, h, threads), "hv": gemm_rate(scored, h, cols, threads),
            "shapes": {"hh": [tokens, h, h], "hv": [scored, h, cols]}, "threads": threads}


def summarize(prof: dict[str, Any]) -> dict[str, Any]:
    """Adds the matmul rates, FLOPs and MFU to a policy's profile (MFU per step, then the median).

    The time of the passes with grad is training_step - _prepare_inputs: the GRPO loss's forward and
    backward and SGT's extra loss (whose backward cannot be told apart from the GRPO one's)."""
    used = [s for s in prof["steps"] if s["step"] in prof["steps_in_median"]]
    rates = measured_rates(prof["model"], used[-1]["passes"])
    for s in prof["steps"]:
        s["mfu_forward_backward"] = mfu(s["flops_train"], s["train_s"], rates)
        seconds = sum(p["seconds"] for p in s["passes"] if not p["grad"])
        s["mfu_rollout_logps"] = mfu(s["flops_rollout"], seconds, rates) if seconds > 0 else None
    flops = statistics.median(sum(s["flops_train"].values()) for s in used)
    seconds = statistics.median(s["train_s"] for s in used)
    prof.update({"gemm_flops_per_s": rates, "flops_forward_backward": flops, "forward_backward_s": seconds,
                 "flops_split": used[-1]["flops_train"], "achieved_flops_per_s": flops / seconds,
                 "mfu_forward_backward": statistics.median(s["mfu_forward_backward"] for s in used)})
    grad = [p for s in used for p in s["passes"] if p["grad"] and "completion" in p]
    if grad:  # off Triton the fused head scores every position; the loss reads only the completions'
        prof["head_scored_per_completion_token"] = sum(p["scored"] for p in grad) / max(
            1, sum(p["completion"] for p in grad))
        # "useful" MFU: the same time, FLOPs as if the head scored only the completion positions
        useful = [mfu(step_flops(prof["model"], [{**p, "scored": p["completion"]} for p in s["passes"]], True),
                      s["train_s"], rates) for s in used]
        prof["mfu_forward_backward_completion_head"] = statistics.median(useful)
    return prof


def table(result: dict[str, Any]) -> str:
    """The medians as a text table, one column per policy."""
    names = list(result["policies"])
    lines = [f"{'part (median s)':<22}" + "".join(f"{n:>16}" for n in names)]
    for key in (*PARTS, *RESIDUALS, "step"):
        lines.append(f"{key:<22}" + "".join(f"{result['policies'][n]['median_s'][key]:>16.3f}" for n in names))
    for label, get in (("coverage (measured)", lambda p: statistics.median(s["coverage"] for s in p["steps"])),
                       ("validation s/prompt", lambda p: p["validation_s_per_prompt"] or float("nan")),
                       ("peak RSS MiB", lambda p: p["peak_rss_mib"]),
                       ("fwd+bwd GFLOP", lambda p: p["flops_forward_backward"] / 1e9),
                       ("achieved GFLOP/s", lambda p: (p["achieved_flops_per_s"] or 0) / 1e9),
                       ("GEMM hh GFLOP/s", lambda p: p["gemm_flops_per_s"]["hh"] / 1e9),
                       ("GEMM hv GFLOP/s", lambda p: p["gemm_flops_per_s"]["hv"] / 1e9),
                       ("MFU fwd+bwd", lambda p: p["mfu_forward_backward"]),
                       ("head scored/compl.", lambda p: p.get("head_scored_per_completion_token", float("nan"))),
                       ("MFU, useful head", lambda p: p.get("mfu_forward_backward_completion_head", float("nan")))):
        lines.append(f"{label:<22}" + "".join(f"{get(result['policies'][n]):>16.3f}" for n in names))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default="tiny", help="tiny, smol-arith, smol-qa or a recipe path")
    parser.add_argument("--regime", default="sgt")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps (the first is warm-up)")
    parser.add_argument("--validation-limit", type=int, default=20, help="held-out prompts per validation")
    parser.add_argument("--set", action="append", default=[], help="extra recipe override, as mutualrl train")
    parser.add_argument("--out", type=Path, required=True, help="folder for the run, the profile and the JSON")
    args = parser.parse_args()
    run = run_pool(args.pool, args.regime, args.steps, args.out, args.validation_limit, args.set)
    metrics = read_jsonl(run["run_dir"] / "metrics.jsonl")
    policies = {path.stem: summarize(policy_profile(path.stem, read_jsonl(path), metrics))
                for path in sorted(run["profile"].glob("*.jsonl"))}
    import torch

    result = {"pool": args.pool, "regime": args.regime, "steps": args.steps, "run_seconds": run["seconds"],
              "command": "mutualrl " + " ".join(run["argv"][2:]), "cpu_count": os.cpu_count(),
              "loadavg_1_5_15": run["loadavg_1_5_15"],
              "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
              "policies": policies}
    path = args.out / f"step-profile-{args.pool}-{args.regime}.json"
    path.write_text(json.dumps(result, indent=1, default=float))
    print(table(result))
    print(json.dumps({"json": str(path), "run_seconds": round(run["seconds"], 1),
                      "mfu": {n: p["mfu_forward_backward"] for n, p in policies.items()}}))


if __name__ == "__main__":
    main()

"""A few records of an exchange, with their provenance: which peer's answer could rescue which prompt.

``mutualrl see inspect RUN --records N`` reads the steps the exchange still holds, newest first, and shows up to N
*rescues*: a prompt where every one of a learner's samples failed (reward below the failure threshold) while a peer's
sample succeeded (above the success threshold): what SGT's gate lets through, and what any sharing regime has to
carry. Each shows the learner's failed answer, the peer's answer, its reward and the shard it came from (the
peer's model, tokenizer and rank, as its manifest names them). With no rescue in the steps kept, the newest records
are shown instead (the heading says which). The thresholds are SGT's defaults, or the run's own ``regime.sgt``
settings when its config names them.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from mutualrl.errors import MutualRLError
from mutualrl.regimes.sgt.spec import SGTSettings
from mutualrl.run_folder import RunPaths
from mutualrl.see import files
from mutualrl.see.shards import load_shard, read_manifest

TEXT_CHARS = 80
"""How much of a prompt or an answer a record shows."""


def thresholds(run: Path | None) -> tuple[float, float]:
    """(success, failure): the run's ``regime.sgt`` thresholds when its config.yaml names them, else SGT's."""
    success, failure = SGTSettings().success_threshold, SGTSettings().failure_threshold
    if run is None or not RunPaths(run).config.is_file():
        return success, failure
    import yaml

    try:
        sgt = ((yaml.safe_load(RunPaths(run).config.read_text(encoding="utf-8")) or {}).get("regime") or {}).get(
            "sgt") or {}
        return float(sgt.get("success_threshold", success)), float(sgt.get("failure_threshold", failure))
    except (OSError, ValueError, TypeError, yaml.YAMLError, AttributeError):  # a damaged config: SGT's defaults
        return success, failure


def step_rows(see_root: Path, step: int) -> dict[str, list[dict[str, Any]]]:
    """Per policy, the rows every committed shard of ``step`` holds (prompt, answer, reward), each with its shard's
    provenance; a shard that does not verify is left out (``see inspect`` reports it)."""
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for manifest in sorted(files.step_dir(see_root, step).glob("*/*.manifest.json")):
        try:
            info = read_manifest(manifest)
            table = load_shard(info).select(["prompt_id", "prompt_text", "response_text", "reward"])
        except (MutualRLError, OSError):
            continue
        where = {"model": info.provenance.get("model"), "tokenizer": info.provenance.get("tokenizer"),
                 "rank": info.rank, "shard": str(info.data_path.relative_to(see_root))}
        for row in table.to_pylist():
            rows[info.policy].append({**row, "policy": info.policy, "step": step, **where})
    return rows


def rescues_at(rows: dict[str, list[dict[str, Any]]], success: float, failure: float) -> list[dict[str, Any]]:
    """Every (learner, prompt) of one step whose samples all failed while a peer's succeeded: the learner's first
    failed answer and the peer's best answer with its provenance."""
    by_prompt: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for policy, policy_rows in rows.items():
        for row in policy_rows:
            by_prompt[row["prompt_id"]][policy].append(row)
    found = []
    for prompt_id, by_policy in sorted(by_prompt.items()):
        for learner, own in sorted(by_policy.items()):
            if not all(r["reward"] < failure for r in own):  # NaN (not scored) never counts as a failure
                continue
            for peer, theirs in sorted(by_policy.items()):
                best = max((r for r in theirs if r["reward"] > success), key=lambda r: r["reward"], default=None)
                if peer != learner and best is not None:
                    found.append({"step": own[0]["step"], "prompt_id": prompt_id, "prompt": own[0]["prompt_text"],
                                  "learner": learner, "samples": len(own), "failed_answer": own[0]["response_text"],
                                  "failed_reward": own[0]["reward"], "peer": peer, "answer": best["response_text"],
                                  "reward": best["reward"], "model": best["model"], "tokenizer": best["tokenizer"],
                                  "rank": best["rank"], "shard": best["shard"]})
    return found


def shown_records(see_root: Path, steps: list[int], limit: int, run: Path | None) -> dict[str, Any]:
    """Up to ``limit`` rescues from the newest steps kept (``kind`` ``rescues``), else the newest step's first
    ``limit`` records (``kind`` ``records``); with the thresholds used."""
    success, failure = thresholds(run)
    out: dict[str, Any] = {"success_threshold": success, "failure_threshold": failure, "kind": "rescues", "rows": []}
    for step in sorted(steps, reverse=True):
        out["rows"].extend(rescues_at(step_rows(see_root, step), success, failure))
        if len(out["rows"]) >= limit:
            break
    out["rows"] = out["rows"][:limit]
    if not out["rows"] and steps:
        newest = step_rows(see_root, max(steps))
        out.update(kind="records", rows=[row for policy in sorted(newest) for row in newest[policy]][:limit])
    return out


def record_lines(shown: dict[str, Any]) -> list[str]:
    """The records as plain lines: a heading, then two or three lines per record."""
    def text(value: Any) -> str:
        return repr(str(value)[:TEXT_CHARS])

    if shown["kind"] == "records":
        lines = [f"Records: no rescue in the steps kept (a learner failing every sample, reward < "
                 f"{shown['failure_threshold']:g}, where a peer succeeded, > {shown['success_threshold']:g}); the "
                 "newest records:"]
        lines += [f"  step {r['step']} {r['policy']} on {r['prompt_id']} {text(r['prompt_text'])}: "
                  f"{text(r['response_text'])} reward {r['reward']:g} ({r['shard']}, model {r['model']})"
                  for r in shown["rows"]]
        return lines
    lines = [f"Records: {len(shown['rows'])} rescue(s), newest first: a learner failed every sample (reward < "
             f"{shown['failure_threshold']:g}) and a peer succeeded (> {shown['success_threshold']:g})"]
    for r in shown["rows"]:
        lines += [f"  step {r['step']} {r['prompt_id']} {text(r['prompt'])}",
                  f"    {r['learner']}: {r['samples']} of {r['samples']} failed, e.g. {text(r['failed_answer'])} "
                  f"(reward {r['failed_reward']:g})",
                  f"    rescued by {r['peer']}: {text(r['answer'])} (reward {r['reward']:g}; model {r['model']}, "
                  f"tokenizer {r['tokenizer']}, rank {r['rank']}: {r['shard']})"]
    return lines

"""The real-model pools smol-qa and smol-arith (issue 29): load offline, held-out split fixed, 2-step runs."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
from e2e_helpers import run_train

from mutualrl.config.loader import load_run_config, resolve_recipe
from mutualrl.pools.builtin import ensure_builtin_model
from mutualrl.tasks.registry import get_task

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from learning import REGIME_ARGS  # noqa: E402  (the benchmark's own command line per regime)

REGIMES = {name: REGIME_ARGS[name] for name in
           ("standalone", "sgt", "xgrpo", "grpo-randpert", "prp-peer", "prp-learner")}
# Small limits: one prompt x K=2 per step, 4 new tokens, 2 validation prompts.
SMALL = ["--max-steps", "2", "--set", "grpo.per_device_train_batch_size=2", "--set", "grpo.num_generations=2",
         "--set", "grpo.max_completion_length=4", "--set", "validation.limit=2", "--set", "validation.max_new_tokens=4",
         "--set", "task.train_limit=8"]


pytestmark = pytest.mark.usefixtures("offline_hub")


@pytest.mark.parametrize("pool", ["smol-qa", "smol-arith"])
def test_pool_loads_offline_with_real_models_and_a_fixed_held_out_split(pool: str) -> None:
    config = load_run_config(pool).config
    models = [p.model for p in config.pool.policies]
    assert models == ["builtin:smollm2-135m", "builtin:gemma3-270m"]
    for model in models:  # set-up fetched them: no download here
        assert (ensure_builtin_model(model.split(":", 1)[1]) / "config.json").exists()
    task = get_task(config.task.name)
    assert config.task.name.endswith("-line") or config.task.name.endswith("-4shot")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train = {e.prompt_id.rsplit("/", 1)[1] for e in task.load(config.task.train_split, "offline")}
        test = {e.prompt_id.rsplit("/", 1)[1] for e in task.load(config.task.eval_split, "offline")}
    assert train and test and not train & test
    assert config.validation.limit is None or config.validation.limit >= 200


# SGT on smol-qa runs in the suite (peers, THL retokenization between two real vocabularies, the
# gated NLL); every other (pool, regime) runs with -m real_pool (smol-qa's six passed on 2026-11-23:
# 13.5 min on a loaded 2-core box).
IN_SUITE = (("smol-qa", "sgt"),)


@pytest.mark.slow
@pytest.mark.parametrize(("pool", "regime"), [
    (p, r) if (p, r) in IN_SUITE else pytest.param(p, r, marks=pytest.mark.real_pool)
    for p in ("smol-qa", "smol-arith") for r in REGIMES])
def test_two_steps_of_every_regime(pool: str, regime: str, tmp_path: Path) -> None:
    run_dir = tmp_path / regime
    done = run_train(resolve_recipe(pool), run_dir, *REGIMES[regime], "--seed", "3", *SMALL, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["policies"]) == {"smollm2-135m", "gemma3-270m"}
    for entry in summary["policies"].values():
        assert entry["steps"] == 2 and entry["eval_before"] is not None and entry["eval_after"] is not None

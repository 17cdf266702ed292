"""benchmarks/lexicon_rl.py: the seed pairing, resumable runs and the rule's verdict, on fabricated per-prompt results
(no training)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from bench_helpers import load_benchmark

bench = load_benchmark("lexicon_rl")
SEEDS = (11, 12, 13, 14, 15, 16)


def scores(family: str, rate: float, rng: random.Random, n: int = 100) -> dict[str, float]:
    """``prompt id -> 0/1`` for ``n`` prompts of ``family``, each solved with probability ``rate``."""
    return {f"lexicon-{family}-{i:04d}": float(rng.random() < rate) for i in range(n)}


def runs(weak_rate: float, strong_rate: float, seed_offset: int = 0) -> dict[int, dict[str, float]]:
    """SmolLM2's (weak: ombric, strong: velish) per-prompt results on six seeds."""
    rng = random.Random(seed_offset)
    return {s: {**scores("ombric", weak_rate, rng), **scores("velish", strong_rate, rng)} for s in SEEDS}


def smol_cells(regime: dict, standalone: dict) -> tuple[dict, dict]:
    cells = []
    for family in ("ombric", "velish"):
        mine = {s: bench.family_scores(v, family) for s, v in regime.items()}
        base = {s: bench.family_scores(v, family) for s, v in standalone.items()}
        cells.append(bench.family_delta(mine, base))
    return cells[0], cells[1]


def test_rl_seeds_pair_with_warm_start_seeds_as_the_rule_says() -> None:
    assert [bench.warm_start_seed(s) for s in SEEDS] == [1, 2, 3, 1, 2, 3]


def test_missing_adapters_are_named_with_their_build_command(tmp_path: Path) -> None:
    overrides, missing = bench.adapter_settings(tmp_path, 12)
    assert f"pool.policies.smollm2-135m.init_adapter={tmp_path.resolve()}/adapters/smollm2-135m-velish-seed2" in \
        overrides
    assert len(missing) == 2 and "--model gemma3-270m --family ombric --seed 2" in missing[1]
    for policy, family in bench.WARM_STARTS.items():
        folder = tmp_path / "adapters" / f"{policy}-{family}-seed2"
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text("{}")
    assert bench.adapter_settings(tmp_path, 15)[1] == []
    assert bench.main(["run", "--warm-start", str(tmp_path), "--out", str(tmp_path / "runs"), "--seeds", "11"]) == 2


def test_a_finished_run_is_reused_and_a_stopped_one_resumed(tmp_path: Path) -> None:
    run_dir = tmp_path / "sgt-seed11"
    fresh = bench.train_command("sgt", 11, run_dir, ["--set", "x=1"], None)
    assert fresh[-8:] == ["--regime", "sgt", "--seed", "11", "-o", str(run_dir), "--set", "x=1"]
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("pool: {}\n")
    (run_dir / "run.json").write_text(json.dumps({"status": "interrupted"}))
    assert bench.run_state(run_dir) == "started"
    assert bench.train_command("sgt", 11, run_dir, ["--set", "x=1"], None)[-4:] == ["train", "--resume", "-o",
                                                                                  str(run_dir)]
    (run_dir / "run.json").write_text(json.dumps({"status": "done"}))
    (run_dir / "summary.json").write_text("{}")
    assert bench.run_state(run_dir) == "done"
    assert bench.run_state(tmp_path / "nothing") == "new"


@pytest.mark.slow  # scipy's first import (the t quantiles), about 3 s alone on the loaded box
def test_verdict_helps_only_when_the_weak_gain_is_clear_and_the_strong_family_kept() -> None:
    standalone = runs(0.0, 0.95, 1)
    weak, strong = smol_cells(runs(0.5, 0.95, 2), standalone)
    assert weak["prompts"] == strong["prompts"] == 100 and len(weak["seeds"]) == 6
    assert weak["ci95"][0] > 0 and bench.verdict(weak, strong) == "helps"
    weak, strong = smol_cells(runs(0.5, 0.6, 3), standalone)  # learned the peer's lexicon, lost its own
    assert strong["ci95"][1] < bench.STRONG_MARGIN and bench.verdict(weak, strong) == "hurts"
    weak, strong = smol_cells(runs(0.0, 0.95, 4), standalone)  # sharing did nothing
    assert strong["ci95"][0] < 0 < strong["ci95"][1] and bench.verdict(weak, strong) == "not established"
    lucky = {s: dict(v) for s, v in standalone.items()}
    lucky[13]["lexicon-ombric-0007"] = 1.0  # one weak prompt on one seed: not above 0 with confidence
    weak, strong = smol_cells(lucky, standalone)
    assert weak["mean"] > 0 and weak["ci95"][0] <= 0 and bench.verdict(weak, strong) == "not established"


def test_verdict_reads_intervals_at_their_edges() -> None:
    def cell(low: float, high: float) -> dict:
        return {"mean": (low + high) / 2, "ci95": [low, high], "seeds": list(SEEDS)}

    assert bench.verdict(cell(0.01, 0.3), cell(-0.06, 0.0)) == "helps"  # strong not wholly below -0.05
    assert bench.verdict(cell(0.01, 0.3), cell(-0.2, -0.051)) == "hurts"
    assert bench.verdict(cell(-0.2, -0.01), cell(-0.01, 0.01)) == "hurts"
    assert bench.verdict(cell(0.0, 0.3), cell(-0.01, 0.01)) == "not established"  # touching 0 is not above it
    assert bench.verdict({"mean": 0.3, "ci95": None, "seeds": [11]}, cell(0, 0)) == "not established"


def test_one_seed_gives_no_interval_and_equal_runs_a_point() -> None:
    standalone = runs(0.0, 0.95, 1)
    one = {11: standalone[11]}
    weak, strong = smol_cells({11: runs(0.5, 0.95, 2)[11]}, one)
    assert weak["ci95"] is None and bench.verdict(weak, strong) == "not established"
    weak, strong = smol_cells(standalone, standalone)  # the same runs: Δ 0 everywhere, no spread
    assert weak["ci95"] == [0.0, 0.0] and not weak["spread"] and bench.verdict(weak, strong) == "not established"


@pytest.mark.slow  # scipy's first import where the test above was left out (the fast tier)
def test_comparison_tables_every_regime_and_policy_against_standalone(tmp_path: Path, monkeypatch) -> None:
    fabricated = {"standalone": runs(0.0, 0.95, 1), "sgt": runs(0.5, 0.95, 2)}

    def policy_scores(out: Path, regime: str, seeds: list[int]) -> dict:
        smol = fabricated.get(regime, {})
        # Gemma mirrors SmolLM2: its weak family is velish
        gemma = {s: {k.replace("ombric", "@").replace("velish", "ombric").replace("@", "velish"): v
                     for k, v in r.items()} for s, r in smol.items()}
        return {"smollm2-135m": smol, "gemma3-270m": gemma}

    monkeypatch.setattr(bench, "policy_scores", policy_scores)
    table = bench.comparison(tmp_path, list(SEEDS), ["standalone", "sgt", "opd-sgt"])
    assert set(table) == {"sgt", "opd-sgt"}
    assert {p: row["verdict"] for p, row in table["sgt"].items()} == {"smollm2-135m": "helps", "gemma3-270m": "helps"}
    assert table["sgt"]["gemma3-270m"]["weak"]["family"] == "velish"
    assert table["opd-sgt"]["smollm2-135m"]["weak"]["mean"] is None  # no runs yet: said, not guessed
    assert table["opd-sgt"]["smollm2-135m"]["verdict"] == "not established"
    assert "| sgt | smollm2-135m | ombric: +0." in bench.markdown(table)


@pytest.mark.parametrize("regime", ["standalone", "sgt", "byte-kd", "byte-kd-rescue", "opd-sgt"])
def test_every_regime_of_the_rule_resolves_on_the_recipe(regime: str, tmp_path: Path) -> None:
    from mutualrl.config.loader import load_run_config

    args = bench.REGIME_ARGS[regime]
    overrides = [args[i + 1] for i, word in enumerate(args) if word == "--set"]
    config = load_run_config(bench.POOL, overrides=overrides, regime=args[1], check_grpo=False).config
    assert config.regime.name == args[1]
    if regime == "byte-kd-rescue":
        assert config.regime.bytekd.rescue_lam == config.regime.sgt.lam == 0.1
    if regime == "byte-kd":
        assert config.regime.bytekd.rescue_lam == 0.0
    if regime.startswith("byte-kd"):  # the amendment before any RL run: the exact form does not fit this box
        assert config.regime.bytekd.distribution == "canonical"

"""benchmarks/lexicon_rl.py: the seed pairing, resumable runs and the rule's verdict, on fabricated per-prompt results
(no training)."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
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


def finished_run(out: Path, regime: str, seed: int, **changes: object) -> Path:
    """A finished run folder of the rule: the settings the check reads, in the shape ``mutualrl train`` writes them
    (the last test below checks that shape against the real resolver), then ``changes`` (``grpo__max_steps=2``)."""
    run_dir = out / f"{regime}-seed{seed}"
    run_dir.mkdir(parents=True)
    warm = bench.warm_start_seed(seed)
    config = {"pool": {"name": bench.POOL, "policies": [
        {"name": policy, "init_adapter": f"/w/adapters/{policy}-{family}-seed{warm}"}
        for policy, family in bench.WARM_STARTS.items()]},
        "regime": {"name": bench.REGIME_ARGS[regime][1],
                   "bytekd": {"distribution": "canonical", "rescue_lam": 0.1 if regime == "byte-kd-rescue" else 0.0}},
        "grpo": {"max_steps": 40, "seed": seed}, "validation": {"limit": None}}
    for key, value in changes.items():
        *parents, last = key.split("__")
        node = config
        for part in parents:
            node = node[part]
        node[last] = value
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    (run_dir / "run.json").write_text(json.dumps({"status": "done"}))
    (run_dir / "summary.json").write_text(json.dumps({"seconds": 1200.0}))
    return run_dir


def no_training(*args, **kwargs):
    raise AssertionError("a training was started")


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
    helped = runs(0.5, 0.95, 2)
    weak, strong = smol_cells(helped, standalone)
    assert weak["prompts"] == strong["prompts"] == 100 and len(weak["seeds"]) == 6
    deltas = {p: {helped[s][p] - standalone[s][p] for s in SEEDS} for p in helped[11] if "ombric" in p}
    constant = [next(iter(d)) for d in deltas.values() if len(d) == 1]
    most_common = max((constant.count(v) for v in set(constant)), default=0)
    assert weak["informative_prompts"] == 100 - most_common > 20  # every prompt but the largest constant block
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
    assert weak["prompts"] == 100 and weak["informative_prompts"] == 0  # no prompt's Δ varies


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
    assert "(6 seeds, 100 prompts, " in bench.markdown(table) and " informative prompts" in bench.markdown(table)


def solved(family: str, right: int, n: int = 100) -> dict[str, float]:
    """``n`` prompts of ``family``, the first ``right`` solved."""
    return {f"lexicon-{family}-{i:04d}": float(i < right) for i in range(n)}


def test_accuracy_levels_are_each_familys_share_solved_per_seed_and_their_mean(tmp_path: Path, monkeypatch) -> None:
    fabricated = {"standalone": {12: {**solved("ombric", 0), **solved("velish", 90)},  # out of order: sorted by seed
                                 11: {**solved("ombric", 3), **solved("velish", 100)}},
                  "sgt": {11: {**solved("ombric", 10), **solved("velish", 80)}}}  # seed 12 not finished

    def policy_scores(out: Path, regime: str, seeds: list[int]) -> dict:
        return {"smollm2-135m": fabricated.get(regime, {}),
                "gemma3-270m": {s: {**solved("velish", 1), **solved("ombric", 50)} for s in fabricated.get(regime, {})}}

    monkeypatch.setattr(bench, "policy_scores", policy_scores)
    levels = bench.accuracy_levels(tmp_path, [11, 12], ["standalone", "sgt", "opd-sgt"])
    smol = levels["standalone"]["smollm2-135m"]
    assert smol["ombric"] == {"mean": pytest.approx(0.015), "per_seed": {"11": 0.03, "12": 0.0}}
    assert list(smol["ombric"]["per_seed"]) == ["11", "12"]
    assert smol["velish"] == {"mean": pytest.approx(0.95), "per_seed": {"11": 1.0, "12": 0.9}}
    assert levels["sgt"]["smollm2-135m"]["ombric"] == {"mean": 0.1, "per_seed": {"11": 0.1}}
    assert levels["sgt"]["gemma3-270m"]["velish"] == {"mean": 0.01, "per_seed": {"11": 0.01}}
    assert levels["opd-sgt"]["gemma3-270m"]["ombric"] == {"mean": None, "per_seed": {}}  # no runs: said, not guessed
    table = bench.levels_markdown(levels)
    assert ("| standalone | smollm2-135m | ombric: 0.015 (11: 0.03 12: 0.00) | velish: 0.950 (11: 1.00 12: 0.90) |"
            in table)
    assert "| sgt | smollm2-135m | ombric: 0.100 (11: 0.10) |" in table
    assert "| opd-sgt | gemma3-270m | velish: no runs | ombric: no runs |" in table


def resolved_run(out: Path, regime: str, seed: int, extra: tuple[str, ...] = (), max_steps: int | None = None):
    """The run folder ``mutualrl train`` starts for ``regime`` on ``seed`` (its config.yaml, as the launcher resolves
    and writes it), and that config."""
    from mutualrl.config.loader import OptionSetting, load_run_config
    from mutualrl.config.resolved import write_resolved_config
    from mutualrl.run_folder import RunPaths

    args = bench.REGIME_ARGS[regime]
    overrides = [args[i + 1] for i, word in enumerate(args) if word == "--set"]
    overrides += [word for word in bench.adapter_settings(out / "warm", seed)[0] if word != "--set"] + list(extra)
    config = load_run_config(bench.POOL, overrides=overrides, regime=args[1], check_grpo=False, max_steps=max_steps,
                             option_settings=[OptionSetting("--seed", "grpo.seed", seed)]).config
    run_dir = out / f"{regime}-seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    write_resolved_config(RunPaths(run_dir), config, bench.POOL)
    return run_dir, config


@pytest.mark.parametrize("regime", ["standalone", "sgt", "byte-kd", "byte-kd-rescue", "opd-sgt"])
def test_every_regime_of_the_rule_resolves_on_the_recipe(regime: str, tmp_path: Path) -> None:
    run_dir, config = resolved_run(tmp_path, regime, 13)
    args = bench.REGIME_ARGS[regime]
    rule = bench.rule_settings(regime, 13, bench.recipe_max_steps())
    assert bench.first_difference(run_dir, rule) is None  # the check reads what the launcher writes
    assert bench.first_difference(run_dir, bench.rule_settings(regime, 14, 40)) == "grpo.seed is 13, not 14"
    smoke, _ = resolved_run(tmp_path / "smoke", regime, 13, ("validation.limit=4",), max_steps=2)
    assert bench.first_difference(smoke, rule) == "grpo.max_steps is 2, not 40"
    if regime.startswith("byte-kd"):
        exact, _ = resolved_run(tmp_path / "exact", regime, 13, ("regime.bytekd.distribution=exact",))
        assert bench.first_difference(exact, rule) == "regime.bytekd.distribution is 'exact', not 'canonical'"
    assert config.regime.name == args[1]
    if regime == "byte-kd-rescue":
        assert config.regime.bytekd.rescue_lam == config.regime.sgt.lam == 0.1
    if regime == "byte-kd":
        assert config.regime.bytekd.rescue_lam == 0.0
    if regime.startswith("byte-kd"):  # the amendment before any RL run: the exact form does not fit this box
        assert config.regime.bytekd.distribution == "canonical"


def test_report_refuses_a_run_that_is_not_the_rules_naming_it(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(bench, "policy_scores", lambda out, regime, seeds: {})  # the check alone is under test
    finished_run(tmp_path, "standalone", 11)
    finished_run(tmp_path, "sgt", 11)
    assert bench.main(["report", "--out", str(tmp_path), "--seeds", "11", "--regimes", "standalone,sgt"]) == 0
    assert (tmp_path / "lexicon-rl.json").is_file()  # the rule's runs pass
    smoke = finished_run(tmp_path, "opd-sgt", 11, grpo__max_steps=2, validation__limit=4)
    (tmp_path / "lexicon-rl.json").unlink()
    capsys.readouterr()
    assert bench.main(["report", "--out", str(tmp_path), "--seeds", "11"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(f"{smoke.resolve()}: grpo.max_steps is 2, not 40")
    assert "need their own --out" in error and not (tmp_path / "lexicon-rl.json").exists()


@pytest.mark.parametrize(("regime", "changes", "said"), [
    ("byte-kd", {"regime__bytekd__distribution": "exact"}, "regime.bytekd.distribution is 'exact', not 'canonical'"),
    ("byte-kd-rescue", {"regime__bytekd__rescue_lam": 0.0}, "regime.bytekd.rescue_lam is 0.0, not 0.1"),
    ("sgt", {"validation__limit": 4}, "validation.limit is 4, not None"),
    ("sgt", {"grpo__seed": 12}, "grpo.seed is 12, not 13"),
    ("sgt", {"regime__name": "standalone"}, "regime.name is 'standalone', not 'sgt'"),
    ("sgt", {"pool__policies": [{"name": "smollm2-135m", "init_adapter": "/w/adapters/smollm2-135m-velish-seed1"}]},
     "pool.policies.smollm2-135m.init_adapter is '/w/adapters/smollm2-135m-velish-seed1', not "
     "'smollm2-135m-velish-seed3'"),
])
def test_a_differing_setting_is_named(regime: str, changes: dict, said: str, tmp_path: Path) -> None:
    run_dir = finished_run(tmp_path, regime, 13, **changes)
    assert bench.first_difference(run_dir, bench.rule_settings(regime, 13, 40)) == said
    assert bench.refusal(tmp_path, [regime], [13], 40).startswith(f"{run_dir}: {said}; ")


def test_run_refuses_before_training_and_reuses_the_rules_runs(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(bench, "subprocess", SimpleNamespace(run=no_training, STDOUT=subprocess.STDOUT))
    for policy in bench.WARM_STARTS:
        folder = tmp_path / "warm" / "adapters" / bench.adapter_name(policy, 11)
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text("{}")
    out = tmp_path / "runs"
    finished_run(out, "sgt", 11)
    argv = ["run", "--warm-start", str(tmp_path / "warm"), "--out", str(out), "--seeds", "11", "--regimes", "sgt"]
    assert bench.main(argv) == 0 and "sgt-seed11: finished, reused" in capsys.readouterr().out
    assert bench.main([*argv, "--max-steps", "2"]) == 2  # a smoke test may not take the rule's run as its own
    assert capsys.readouterr().err.startswith(f"{out.resolve() / 'sgt-seed11'}: grpo.max_steps is 40, not 2")
    stopped = finished_run(out, "standalone", 11, grpo__max_steps=2)
    (stopped / "run.json").write_text(json.dumps({"status": "interrupted"}))  # resuming keeps its own settings
    assert bench.main([*argv[:-1], "standalone,sgt"]) == 2
    assert capsys.readouterr().err.startswith(f"{stopped.resolve()}: grpo.max_steps is 2, not 40")
    assert bench.main([*argv, "--set", "validation.limit"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_run_gives_train_absolute_paths(tmp_path: Path, monkeypatch) -> None:
    launched = []

    def train(command, **kwargs):
        launched.append((command, kwargs["cwd"]))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(bench, "subprocess", SimpleNamespace(run=train, STDOUT=subprocess.STDOUT))
    monkeypatch.chdir(tmp_path)
    for policy in bench.WARM_STARTS:
        folder = tmp_path / "warm" / "adapters" / bench.adapter_name(policy, 11)
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text("{}")
    assert bench.main(["run", "--warm-start", "warm", "--out", "runs", "--seeds", "11", "--regimes", "sgt"]) == 0
    [(command, cwd)] = launched
    assert cwd == bench.ROOT != tmp_path
    assert command[command.index("-o") + 1] == str(tmp_path.resolve() / "runs" / "sgt-seed11")
    adapters = [word.split("=", 1)[1] for word in command if ".init_adapter=" in word]
    assert adapters and all(Path(a).is_absolute() and Path(a).is_dir() for a in adapters)
    builds = [word for word in command if ".init_adapter_build=" in word]
    assert all(word.endswith(f"--out {tmp_path.resolve() / 'warm'}") for word in builds)


def test_the_verdict_reads_the_unrounded_interval(tmp_path: Path, monkeypatch) -> None:
    """A weak interval from 4e-5: 0.0 at 4 decimals, yet above 0 -- a help; the counts of prompts are shown."""
    def policy_scores(out: Path, regime: str, seeds: list[int]) -> dict:
        return {policy: {11: {"lexicon-ombric-0000": 1.0, "lexicon-velish-0000": 1.0}} for policy in bench.WEAK}

    def family_delta(mine: dict, theirs: dict) -> dict:
        ombric = any("ombric" in prompt for prompt in mine[11])
        return {"seeds": list(SEEDS), "prompts": 100, "informative_prompts": 37 if ombric else 12,
                "mean": 0.1 if ombric else 0.0, "ci95": [4e-5, 0.2] if ombric else [-0.01, 0.01], "p": 0.04,
                "spread": True, "per_seed": {"11": 0.123456}}

    monkeypatch.setattr(bench, "policy_scores", policy_scores)
    monkeypatch.setattr(bench, "family_delta", family_delta)
    assert bench.main(["report", "--out", str(tmp_path), "--regimes", "standalone,sgt"]) == 0
    found = json.loads((tmp_path / "lexicon-rl.json").read_text())["regimes"]["sgt"]
    assert found["smollm2-135m"]["weak"]["ci95"] == [0.0, 0.2]  # shown rounded
    assert found["smollm2-135m"]["verdict"] == "helps"  # read unrounded
    assert found["smollm2-135m"]["weak"]["per_seed"] == {"11": 0.1235}
    assert found["gemma3-270m"]["weak"]["informative_prompts"] == 12
    assert found["gemma3-270m"]["verdict"] == "not established"
    text = (tmp_path / "lexicon-rl.md").read_text()
    assert "(6 seeds, 100 prompts, 37 informative prompts)" in text
    assert "(6 seeds, 100 prompts, 12 informative prompts: fewer than the 20 its coverage was checked from)" in text


def test_the_warm_start_interval_averages_the_rl_seeds_of_each_warm_start_by_hand() -> None:
    """RL seeds 11/14, 12/15, 13/16 share a warm start: with the warm starts as units, each pair's Δ is averaged
    prompt by prompt, and the interval is the crossed one of that 3 × P matrix."""
    import numpy as np

    from mutualrl.evaluation.crossed import crossed_stats

    prompts = [f"p{i}" for i in range(4)]
    delta = {11: [1, 0, 1, 0], 14: [1, 1, 1, 0], 12: [0, 0, 1, 0], 15: [0, 0, 0, 0], 13: [1, 1, 1, 1], 16: [0, 1, 1, 1]}
    ours = {s: {p: float(d) for p, d in zip(prompts, row, strict=True)} for s, row in delta.items()}
    base = {s: {p: 0.0 for p in prompts} for s in delta}
    cell = bench.family_delta(ours, base)
    by_hand = np.array([[1, 0.5, 1, 0], [0, 0, 0.5, 0], [0.5, 1, 1, 1]])  # [warm start 1, 2, 3] x prompts
    assert cell["warm_start_ci95"] == pytest.approx(list(crossed_stats(by_hand).ci95), abs=1e-12)
    assert cell["warm_start_ci95"] != pytest.approx(cell["ci95"])  # not the six seeds' interval
    assert bench.family_delta({11: ours[11], 14: ours[14]}, {11: base[11], 14: base[14]})["warm_start_ci95"] is None

"""`mutualrl complementarity` against tables computed by hand (paper App. "Cross-policy complementarity")."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.errors import DataError
from mutualrl.evaluation.complementarity import (
    align,
    analyze,
    difficulty_table,
    groups_from_results,
    usability_table,
)
from mutualrl.evaluation.results import ModelEvalResult, PromptResult, save_eval_file

# Two models on 12 prompts (1 = solved). Model A also answered p13, which B did not: it is left out.
#            p01 p02 p03 p04 p05 p06 p07 p08 p09 p10 p11 p12
A_SCORES = [1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0]
B_SCORES = [1, 1, 1, 1, 1, 0, 1, 1, 0, 0, 1, 0]
PIDS = [f"p{i:02d}" for i in range(1, 13)]


def result(name: str, scores: dict[str, float]) -> ModelEvalResult:
    return ModelEvalResult(
        model=f"org/{name}",
        policy=name,
        records=[PromptResult(pid, "math", f"prompt {pid}", "...", "1", None, float(s)) for pid, s in scores.items()],
    )


@pytest.fixture
def two_model_file(tmp_path: Path) -> Path:
    a = dict(zip(PIDS, A_SCORES, strict=True))
    a["p13"] = 1.0
    b_items = list(zip(PIDS, B_SCORES, strict=True))
    random.Random(0).shuffle(b_items)  # record order must not matter: prompts are aligned by id
    path = tmp_path / "eval.json"
    save_eval_file(path, [result("A", a), result("B", dict(b_items))])
    return path


def test_pairs_pool_and_buckets_by_hand(two_model_file: Path) -> None:
    from mutualrl.evaluation.results import load_results

    report = analyze(load_results(two_model_file))
    assert report["n_prompts"] == 12 and report["dropped_prompts"] == {"A": 1, "B": 0}

    # S_A = {p01..p06, p09} (7), S_B = {p01..p05, p07, p08, p11} (8)
    # S_A ∩ S_B = {p01..p05} (5), S_A ∪ S_B = {p01..p09, p11} (10) -> Jaccard 5/10
    # A fails on {p07, p08, p10, p11, p12} (5); B solves p07, p08, p11 -> rescue 3/5
    # B fails on {p06, p09, p10, p12} (4); A solves p06, p09 -> rescue 2/4
    a_to_b, b_to_a = report["pairs"]
    assert (a_to_b["learner"], a_to_b["peer"]) == ("A", "B")
    assert a_to_b["learner_success"] == pytest.approx(7 / 12)
    assert a_to_b["peer_success"] == pytest.approx(8 / 12)
    assert a_to_b["jaccard"] == pytest.approx(0.5)
    assert a_to_b["peer_rescues_fail"] == pytest.approx(3 / 5)
    assert (a_to_b["rescued"], a_to_b["learner_failures"]) == (3, 5)
    assert b_to_a["jaccard"] == pytest.approx(0.5)
    assert b_to_a["peer_rescues_fail"] == pytest.approx(2 / 4)

    # Pool: mean single (7+8)/24; any = 10/12; all = 5/12;
    # exactly one = {p06, p07, p08, p09, p11} = 5/12; none = {p10, p12} = 2/12
    pool = report["pool"]
    assert pool["mean_single"] == pytest.approx(15 / 24)
    assert pool["any"] == pytest.approx(10 / 12)
    assert pool["all"] == pytest.approx(5 / 12)
    assert pool["exactly_one"] == pytest.approx(5 / 12)
    assert pool["none"] == pytest.approx(2 / 12)

    # Buckets: mean reward 1.0 for p01..p05, 0.5 for p06 p07 p08 p09 p11, 0.0 for p10 p12.
    # Sorted high to low, ties by prompt id: p01 p02 p03 p04 | p05 p06 p07 p08 | p09 p11 p10 p12
    easy, medium, hard = report["difficulty"]["buckets"]
    assert [b["n"] for b in (easy, medium, hard)] == [4, 4, 4]
    # easy: both solve all four -> Jaccard 4/4, nobody alone
    assert (easy["jaccard"], easy["exactly_one"], easy["any"], easy["all"]) == (1.0, 0.0, 1.0, 1.0)
    # medium: A solves p05 p06, B solves p05 p07 p08 -> Jaccard |{p05}| / |{p05..p08}| = 1/4;
    #         exactly one: p06 p07 p08 -> 3/4; all: p05 -> 1/4
    assert medium["jaccard"] == pytest.approx(0.25)
    assert medium["exactly_one"] == pytest.approx(0.75)
    assert medium["all"] == pytest.approx(0.25)
    assert (medium["mean_reward_min"], medium["mean_reward_max"]) == (0.5, 1.0)
    # hard: A solves p09, B solves p11 -> Jaccard 0/2; exactly one 2/4; any 2/4
    assert hard["jaccard"] == 0.0
    assert hard["exactly_one"] == pytest.approx(0.5)
    assert hard["any"] == pytest.approx(0.5)
    assert hard["per_model"] == {"A": 0.25, "B": 0.25}


def test_regime_usability_by_hand_without_and_with_prp_ratios(two_model_file: Path) -> None:
    from mutualrl.evaluation.results import load_results

    out = align(load_results(two_model_file))
    # K = 1 per policy: XGRPO is usable where the models disagree (p06 p07 p08 p09 p11, for both learners: 10
    # of 24 pairs); SGT where the learner fails and the peer solves (A: p07 p08 p11; B: p06 p09 -> 5 pairs).
    usability = usability_table(groups_from_results(out))
    assert usability["n_pairs"] == 24 and usability["prp_available"] is False
    assert "PRP usability needs importance ratios" in usability["note"]
    rows = {r["label"]: r["count"] for r in usability["rows"]}
    assert rows == {"Neither XGRPO nor SGT": 14, "Only XGRPO": 5, "XGRPO and SGT": 5}
    assert usability["rows"][1]["fraction"] == pytest.approx(5 / 24)
    assert usability["per_learner"]["A"] == {"n": 12, "xgrpo": pytest.approx(5 / 12), "sgt": pytest.approx(3 / 12)}
    assert usability["per_learner"]["B"]["sgt"] == pytest.approx(2 / 12)

    # PRP-usable pairs (a ratio in [0.8, 1.2], bounds included): (p01,A) (p06,A) (p07,A) (p06,B) (p10,B).
    ratios = {(pid, learner): [2.0] for pid in PIDS for learner in ("A", "B")}
    ratios.update({("p01", "A"): [0.5, 1.1], ("p06", "A"): [0.95], ("p07", "A"): [1.2], ("p06", "B"): [0.8],
                   ("p10", "B"): [1.0]})
    full = usability_table(groups_from_results(out), ratios)
    counts = {r["label"]: r["count"] for r in full["rows"]}
    # A: none p02-p05 p10 p12 (6); only XGRPO p09; XGRPO+SGT p08 p11; only PRP p01; PRP+XGRPO p06; all three p07
    # B: none p01-p05 p12 (6); only XGRPO p07 p08 p11; XGRPO+SGT p09; only PRP p10; all three p06
    assert counts == {"None of the three": 12, "Only XGRPO": 4, "XGRPO and SGT, not PRP": 3, "Only PRP": 2,
                      "PRP and XGRPO, not SGT": 1, "All three": 2}
    assert full["prp_available"] is True and full["note"] is None
    partial = usability_table(groups_from_results(out), {("p01", "A"): [1.0]})
    assert partial["prp_available"] is False and "23 (prompt, learner) pairs had no ratios" in partial["note"]


def test_three_model_pool_and_mean_pairwise_jaccard_in_buckets() -> None:
    #        q1 q2 q3 q4 q5 q6
    m1 = [1, 1, 0, 0, 1, 0]
    m2 = [1, 0, 1, 0, 0, 0]
    m3 = [1, 0, 0, 0, 1, 1]
    qs = [f"q{i}" for i in range(1, 7)]
    results = [result(n, dict(zip(qs, s, strict=True))) for n, s in (("M1", m1), ("M2", m2), ("M3", m3))]
    report = analyze(results)
    # solved by: q1 3, q2 1, q3 1, q4 0, q5 2, q6 1
    pool = report["pool"]
    assert pool["any"] == pytest.approx(5 / 6) and pool["all"] == pytest.approx(1 / 6)
    assert pool["exactly_one"] == pytest.approx(3 / 6) and pool["mean_single"] == pytest.approx(8 / 18)
    pair = next(p for p in report["pairs"] if (p["learner"], p["peer"]) == ("M1", "M3"))
    # S1 = {q1 q2 q5}, S3 = {q1 q5 q6}: Jaccard 2/4; M1 fails {q3 q4 q6}, M3 solves q6: 1/3
    assert pair["jaccard"] == pytest.approx(0.5) and pair["peer_rescues_fail"] == pytest.approx(1 / 3)
    assert len(report["pairs"]) == 6
    # mean reward: q1 1, q5 2/3, q2 q3 q6 1/3 (ties by id), q4 0 -> easy {q1 q5} | medium {q2 q3} | hard {q6 q4}
    easy, medium, hard = report["difficulty"]["buckets"]
    # easy: J(M1,M2) = 1/2, J(M1,M3) = 2/2, J(M2,M3) = 1/2 -> mean 2/3; exactly one: none
    assert easy["jaccard"] == pytest.approx(2 / 3) and easy["exactly_one"] == 0.0
    # medium: M1 {q2}, M2 {q3}, M3 {} -> every pair 0; both prompts solved by exactly one model
    assert medium["jaccard"] == 0.0 and medium["exactly_one"] == 1.0
    # hard: M1 {}, M2 {}, M3 {q6}: J(M1,M2) undefined (n/a), the others 0 -> mean of defined = 0
    assert [p["jaccard"] for p in hard["pairs"]] == [None, 0.0, 0.0]
    assert hard["jaccard"] == 0.0 and hard["exactly_one"] == 0.5


def test_bucket_sizes_and_undefined_rates() -> None:
    scores = [1, 0, 1, 0, 1]
    results = [result("A", {f"x{i}": s for i, s in enumerate(scores)}),
               result("B", {f"x{i}": 1 for i in range(5)})]
    out = align(results)
    assert [b["n"] for b in difficulty_table(out)] == [2, 2, 1]  # extra prompts go to the easier buckets
    report = analyze(results)
    b_to_a = next(p for p in report["pairs"] if p["learner"] == "B")
    assert b_to_a["peer_rescues_fail"] is None  # B never fails: undefined, not 0
    big = [result(n, {f"y{i:03d}": (i * k) % 3 == 0 for i in range(500)}) for k, n in ((1, "A"), (2, "B"))]
    assert [b["n"] for b in analyze(big)["difficulty"]["buckets"]] == [167, 167, 166]  # the paper's split


def test_given_difficulty_and_errors() -> None:
    a = result("A", {"p": 1, "q": 0, "r": 0})
    b = result("B", {"p": 1, "q": 0, "r": 1})
    # External difficulty (e.g. from several samples) reorders the buckets: r easiest, p hardest.
    table = difficulty_table(align([a, b]), 3, {"p": 0.1, "q": 0.5, "r": 0.9})
    assert [b_["per_model"] for b_ in table] == [{"A": 0.0, "B": 1.0}, {"A": 0.0, "B": 0.0}, {"A": 1.0, "B": 1.0}]
    with pytest.raises(DataError, match="lack 1 prompt"):
        difficulty_table(align([a, b]), 3, {"p": 0.1, "q": 0.5})
    with pytest.raises(DataError, match="at least two"):
        analyze([a])
    with pytest.raises(DataError, match="share no prompt_id"):
        analyze([a, result("C", {"z": 1})])
    # K = 2: learner [0, 1] in the pool [0, 1, 0, 1] has the pool's mean and population std, but GRPO's
    # sample std (0.71 vs the pool's 0.58) differs, so pooling changes its advantages: XGRPO-usable.
    groups = {"q": {"A": [0.0, 1.0], "B": [0.0, 1.0]}, "r": {"A": [1.0, 1.0], "B": [1.0, 1.0]}}
    assert usability_table(groups)["per_learner"]["A"] == {"n": 2, "xgrpo": 0.5, "sgt": 0.0}


def test_cli_json_tables_and_run_folder(two_model_file: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["complementarity", str(two_model_file), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["pairs"][0]["peer_rescues_fail"] == pytest.approx(0.6)
    assert data["pool"]["exactly_one"] == pytest.approx(5 / 12)

    res = runner.invoke(app, ["complementarity", str(two_model_file), "-o", str(tmp_path / "report.json")])
    assert res.exit_code == 0, res.output
    for text in ("Tab. complementarity-pairs", "0.6000 (3/5)", "0.5000 (2/4)", "0.8333", "Only XGRPO", "20.83",
                 "medium", "0.2500"):
        assert text in res.output, text
    assert json.loads((tmp_path / "report.json").read_text())["n_prompts"] == 12

    # A run folder: each policy's validation file at the chosen step.
    run = tmp_path / "run"
    for name, scores in (("A", A_SCORES), ("B", B_SCORES)):
        r = result(name, dict(zip(PIDS, scores, strict=True)))
        r.save(run / "eval" / name / "step-000020.json")
        result(name, {pid: 0.0 for pid in PIDS}).save(run / "eval" / name / "step-000000.json")
    res = runner.invoke(app, ["complementarity", str(run), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["pool"]["any"] == pytest.approx(10 / 12)
    res = runner.invoke(app, ["complementarity", str(run), "--step", "first", "--json"])
    assert json.loads(res.output)["pool"]["any"] == 0.0

    ratios = tmp_path / "ratios.jsonl"
    ratios.write_text("\n".join(json.dumps({"prompt_id": p, "learner": n, "ratios": [1.0]}) for p in PIDS
                                for n in ("A", "B")))
    res = runner.invoke(app, ["complementarity", str(two_model_file), "--prp-ratios", str(ratios), "--json"])
    rows = {r["label"]: r["count"] for r in json.loads(res.output)["usability"]["rows"]}
    assert rows["Only PRP"] == 14 and rows["All three"] == 5 and rows["PRP and XGRPO, not SGT"] == 5

    res = runner.invoke(app, ["complementarity"])
    assert res.exit_code == 2 and "give eval result files" in " ".join(res.output.split())
    (tmp_path / "broken.json").write_text("{")
    res = runner.invoke(app, ["complementarity", str(tmp_path / "broken.json")])
    assert res.exit_code == 2 and "broken.json: not valid JSON" in " ".join(res.output.split())

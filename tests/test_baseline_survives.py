"""A researcher's sweep keeps its baseline, and every long wait speaks: the no-reward stop off in sweeps (and said),
a resume that takes what docs/settings.md lets change, advice that does not loop, the go/no-go's warnings, intervals
and thresholds, and the progress of its loading and scoring. In-process: no training."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from mutualrl.config.loader import load_run_config
from mutualrl.errors import DataError, UsageError
from mutualrl.evaluation.complementarity import Outcomes
from mutualrl.launch.sweep.grid import NO_REWARD_STOP, SweepSpec, failed_advice, resolved_config, stop_rule_lines
from mutualrl.run_folder import RunPaths

STOP_OFF = f"{NO_REWARD_STOP}=0"


def test_a_sweep_trains_every_run_to_its_end_unless_told_and_says_so(tmp_path: Path) -> None:
    spec = SweepSpec(tmp_path / "sw", ["standalone", "sgt"], [1], max_steps=40)
    point = spec.points()[0]
    assert spec.run_sets(point) == [STOP_OFF]
    argv = spec.argv(point)
    assert argv[argv.index("--set") + 1] == STOP_OFF  # the printed command says it
    assert resolved_config(spec, point).task.stop_after_no_reward_steps == 0
    [line] = stop_rule_lines(spec)
    assert line.startswith(f"every run: {STOP_OFF} (") and f"--set {NO_REWARD_STOP}=N turns it on" in line

    told = SweepSpec(tmp_path / "sw", ["standalone", "sgt"], [1], max_steps=40, sets=[f"{NO_REWARD_STOP}=30"])
    assert told.run_sets(told.points()[0]) == [f"{NO_REWARD_STOP}=30"]
    [warning] = stop_rule_lines(told)
    assert warning.startswith(f"warning: {NO_REWARD_STOP} is on: a run of standalone is stopped")
    assert "a run of sgt only when its peers' do not score" in warning
    sharing_only = SweepSpec(tmp_path / "sw", ["sgt"], [1], sets=[f"{NO_REWARD_STOP}=30"])
    assert stop_rule_lines(sharing_only) == []  # one way of judging: nothing to warn of
    turned_off = SweepSpec(tmp_path / "sw", ["standalone", "sgt"], [1], sets=[f"{NO_REWARD_STOP}=null"])
    assert stop_rule_lines(turned_off) == []
    gridded = SweepSpec(tmp_path / "sw", ["standalone"], [1], grid=[(NO_REWARD_STOP, ["0", "30"])])
    assert [p.sets for p in gridded.points()] == [(STOP_OFF,), (f"{NO_REWARD_STOP}=30",)]
    assert gridded.run_sets(gridded.points()[1]) == [f"{NO_REWARD_STOP}=30"]


def stored_run(folder: Path, status: str, *overrides: str) -> RunPaths:
    """A run folder as a launch leaves it before any checkpoint: its resolved config and its record."""
    from mutualrl.config.resolved import write_resolved_config

    paths = RunPaths(folder)
    folder.mkdir(parents=True)
    config = load_run_config("tiny", [*overrides, f"output_dir={folder}"], max_steps=40).config
    write_resolved_config(paths, config, "tiny")
    paths.run_json.write_text(json.dumps({"status": status, "reason": "interrupted"}))
    return paths


def test_a_run_to_resume_takes_the_settings_that_may_change_on_resume(tmp_path: Path) -> None:
    from mutualrl.launch.run import reuse_finished

    paths = stored_run(tmp_path / "run", "interrupted")
    console = Console(file=io.StringIO())
    changed = load_run_config("tiny", [STOP_OFF, f"output_dir={paths.root}"], max_steps=40).config
    assert reuse_finished(paths, changed, console) is False  # resumed, taking the new value
    other = load_run_config("tiny", ["grpo.learning_rate=2e-5", f"output_dir={paths.root}"], max_steps=40).config
    with pytest.raises(UsageError, match="grpo.learning_rate"):
        reuse_finished(paths, other, console)


def test_a_finished_run_is_the_same_run_under_any_stop_rule(tmp_path: Path) -> None:
    from mutualrl.launch.rundir.record import settings_differences

    paths = stored_run(tmp_path / "run", "done")
    changed = load_run_config("tiny", [STOP_OFF, "see.peer_timeout_s=99", f"output_dir={paths.root}"],
                              max_steps=40).config
    assert settings_differences(paths, changed) == []
    longer = load_run_config("tiny", [STOP_OFF, f"output_dir={paths.root}"], max_steps=80).config
    assert settings_differences(paths, longer) and not settings_differences(paths, longer, may_change=False)


def test_the_sweeps_advice_for_a_run_the_no_reward_stop_ended_does_not_loop(tmp_path: Path) -> None:
    from mutualrl.training.reward_signal_watch import NO_REWARD

    spec = SweepSpec(tmp_path, ["standalone", "sgt"], [1])
    for name, reason in (("standalone-seed1", f"policy tiny-sp failed: policy tiny-sp: {NO_REWARD} in 30 steps"),
                         ("sgt-seed1", "interrupted")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(json.dumps({"status": "failed", "reason": reason}))
    advice = failed_advice(spec, ["standalone-seed1", "sgt-seed1"])
    assert advice.startswith("the same command resumes sgt-seed1; standalone-seed1 stopped because nothing scored")
    assert f"would stop it again: add --set {STOP_OFF} to it" in advice
    assert failed_advice(spec, ["sgt-seed1"]) == "the same command resumes sgt-seed1"


def outcomes(columns: list[list[float]], threshold: float = 0.5) -> Outcomes:
    scores = np.array(columns, dtype=float).T  # (n_prompts, n_models)
    n = scores.shape[0]
    return Outcomes([f"m{k}" for k in range(len(columns))], [f"p{i}" for i in range(n)], ["t"] * n, scores,
                    threshold, {})


def test_the_go_no_go_warns_of_a_policy_the_no_reward_stop_would_end() -> None:
    from mutualrl.launch.pool_check import stop_warnings

    out = outcomes([[1, 0, 1, 0], [0, 0, 0, 0]])
    standalone = load_run_config("tiny", regime="standalone", max_steps=32).config
    [line] = stop_warnings(standalone, out)
    assert line.startswith("  warning: m1 scored nothing above 0 on the sample") and "(32 steps planned)" in line
    assert "this run would be stopped" in line and f"--set {STOP_OFF} trains it" in line
    sgt = load_run_config("tiny", regime="sgt", max_steps=32).config
    [line] = stop_warnings(sgt, out)
    assert "a standalone baseline of it would be stopped" in line
    assert stop_warnings(load_run_config("tiny", [STOP_OFF], max_steps=32).config, out) == []
    assert stop_warnings(load_run_config("tiny", max_steps=8).config, out) == []  # too short to be stopped


def test_the_success_threshold_comes_from_the_rewards_range() -> None:
    from mutualrl.evaluation.go_no_go import check_lines, policy_checks, success_threshold, verdict

    assert success_threshold(np.array([[0.0, 1.0], [1.0, 0.0]]))[0] == 0.5
    shaped = np.array([[-1.0, -0.2], [-0.6, 0.0], [-1.0, -1.0]])  # a penalty-only reward: always <= 0
    threshold, why = success_threshold(shaped)
    assert threshold == -0.5 and "-1 to 0" in why
    checks = policy_checks(outcomes(shaped.T.tolist(), threshold))
    assert verdict(checks).kind != "nothing-to-learn"  # a >= 0.5 rule called this pool hopeless
    assert success_threshold(np.full((4, 2), -1.0)) == (None, "every completion got reward -1")
    [line] = check_lines(checks, 3, None, "every completion got reward -1")
    assert line.startswith("  nothing-to-learn: every sampled completion got the same reward")
    assert success_threshold(np.full((4, 2), 0.3)) == (None, "every completion got reward 0.3")  # flat, inside [0, 1]
    [line] = check_lines(policy_checks(outcomes(np.full((2, 4), 0.3).tolist(), 0.5)), 4, None,
                         "every completion got reward 0.3")
    assert line.startswith("  nothing-to-learn: every sampled completion got the same reward")  # not "solves no row"
    nothing, _ = success_threshold(np.zeros((4, 2)))  # a verifier's 0 everywhere: no policy solves a row
    assert nothing == 0.5 and verdict(policy_checks(outcomes(np.zeros((2, 4)).tolist(), 0.5))).meaning.startswith(
        "no policy solves any sampled row")
    assert success_threshold(np.ones((4, 2)))[0] == 0.5  # all solved: too easy, said as such
    assert verdict(policy_checks(outcomes(np.ones((2, 4)).tolist(), 0.5))).kind == "too-easy"


def test_the_verdict_gives_its_interval_and_says_when_the_sample_does_not_settle_it() -> None:
    from mutualrl.evaluation.go_no_go import check_lines, policy_checks, verdict

    # 18 failures each, a peer solves 2 of each: 4 of 36 (11%), 95% interval about 4% to 25%: either verdict
    first = [1, 1] + [0] * 18
    second = [0, 0, 1, 1] + [0] * 16
    checks = policy_checks(outcomes([first, second]))
    found = verdict(checks)
    assert "peers solve 4 of the 36 failures (11%, 95% interval 4% to 25%)" in found.meaning
    assert "not settled" in found.meaning
    lines = check_lines(checks, 20, 0.5, "a reward in [0, 1]")
    assert lines[0].startswith("  m0: reward@1 0.10 (95% interval 0.03 to 0.30)")
    clear = policy_checks(outcomes([[1] * 10 + [0] * 10, [0] * 10 + [1] * 10]))
    assert "not settled" not in verdict(clear).meaning  # every failure solved by the peer: 0.83 to 1


def coverage(interval, n: int, p: float) -> float:
    """The exact coverage of ``interval(k, n)`` for a binomial share ``p``: the chance its interval holds ``p``."""
    import math

    return sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)
               if (b := interval(k, n)) and b[0] <= p <= b[1])


def test_the_wilson_interval_keeps_its_coverage_on_a_few_dozen_rows_where_the_normal_one_does_not() -> None:
    """Exact coverage by enumeration (every count's chance), where a share's interval fails: a few dozen rows, a
    share near 0. Wilson's stays near 95% (at least 92%); the normal approximation's falls far below."""
    import math

    from mutualrl.evaluation.go_no_go import wilson

    def wald(k: int, n: int) -> tuple[float, float]:
        share = k / n
        half = 1.96 * math.sqrt(share * (1 - share) / n)
        return share - half, share + half

    for n in (10, 20, 32, 100):
        for p in (0.03, 0.1, 0.3, 0.5):
            assert coverage(wilson, n, p) >= 0.92, (n, p)
    assert coverage(wald, 20, 0.03) < 0.6  # the interval this replaces' failure, where the go/no-go lives
    assert wilson(0, 0) is None and wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == pytest.approx(1.0)


def test_piped_progress_says_each_phase_how_far_and_is_never_silent_for_long() -> None:
    from mutualrl.launch import said_progress

    out = io.StringIO()
    console = Console(file=out, width=200)
    clock = [0.0]
    plain = said_progress.PlainProgress(console, "go/no-go", "rows", clock=lambda: clock[0])
    advance = plain.bar("tiny-bpe", 32)
    plain.status("loading tiny-bpe on cpu")
    clock[0] = 5.0
    plain.tick()  # said 5 s ago: nothing yet
    clock[0] = 9.0
    plain.tick()
    advance(16)
    clock[0] = 12.0
    advance(16)
    assert out.getvalue().splitlines() == [
        "go/no-go: loading tiny-bpe on cpu; tiny-bpe: 0/32 rows (0 s)",
        "go/no-go: loading tiny-bpe on cpu; tiny-bpe: 0/32 rows (9 s)",
        "go/no-go: scoring with tiny-bpe; tiny-bpe: 32/32 rows (12 s)"]
    assert said_progress.ALIVE_S < 10  # the promise: no silence over 10 s


def test_the_go_no_go_says_what_it_does_when_piped() -> None:
    from mutualrl.launch.said_progress import said_progress

    out = io.StringIO()
    with said_progress(Console(file=out, width=200), "go/no-go", "rows") as (on_status, factory):
        on_status("loading tokenizer of tiny-bpe")
        factory("tiny-bpe", 4)(4)
    assert out.getvalue().splitlines()[0].startswith("go/no-go: loading tokenizer of tiny-bpe (")
    assert "tiny-bpe: 4/4 rows" in out.getvalue()


def test_eval_says_how_far_it_is_when_piped_and_nothing_when_told_not_to() -> None:
    """``mutualrl eval`` piped to a log: rich's bar draws nothing until it ends, so eval says its phases and each
    model's prompts as lines (the go/no-go's), not a bar at the end."""
    from mutualrl.launch.evaluate import print_nothing, shown_progress

    out = io.StringIO()
    with shown_progress(True, Console(file=out, width=200)) as (on_status, factory):
        on_status("loading builtin:tiny-bpe on cpu")
        factory("tiny-bpe", 32)(32)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("eval: loading builtin:tiny-bpe on cpu (") and "tiny-bpe: 32/32 prompts" in lines[-1]
    with shown_progress(False) as (on_status, factory):
        assert on_status is print_nothing and factory is None


def test_the_stop_grace_counts_a_first_step_from_the_start_of_training_not_from_model_loading() -> None:
    from mutualrl.launch.supervise.stop_grace import StepTimes

    clock = [0.0]
    times = StepTimes(clock=lambda: clock[0])
    for at, status in [(0, {"step": 0, "phase": "starting"}), (90, {"step": 0, "phase": "training"}),
                       (93, {"step": 1, "phase": "training"})]:
        clock[0] = at
        times.look({"a": status})
    assert times.step_s("a") == 3.0  # the "1.5 x 94 s" counted 90 s of loading


def test_thl_check_reads_the_data_files_train_reads(tmp_path: Path) -> None:
    from mutualrl.cli.thl_cmd import read_texts, row_text

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps({"prompt": f"{i}-1+2=", "answer": i + 1}) + "\n"
                                              for i in range(3)))
    assert read_texts(str(data)) == ["0-1+2= 1", "1-1+2= 2", "2-1+2= 3"]
    assert read_texts(str(data / "train.jsonl")) == ["0-1+2= 1", "1-1+2= 2", "2-1+2= 3"]
    (tmp_path / "texts.jsonl").write_text(json.dumps({"text": "Hello world"}) + "\n")
    assert read_texts(str(tmp_path / "texts.jsonl")) == ["Hello world"]
    chat = {"prompt": [{"role": "user", "content": "Add 2 and 3."}], "completion": "5"}
    assert row_text(chat) == "Add 2 and 3. 5"
    with pytest.raises(DataError, match="missing does not exist"):
        read_texts(str(tmp_path / "missing"))
    (data / "train.jsonl").write_text(json.dumps({"prompt": "1+1=", "answer": 2}) + "\n" + json.dumps({"id": 3}) + "\n")
    with pytest.raises(DataError, match="row 1 has no text, prompt or completion"):  # named, not dropped
        read_texts(str(data))


def test_thl_checks_verdict_says_what_the_numbers_mean_for_a_pair() -> None:
    from mutualrl.thl.check_verdict import pair_verdict, ratio_verdict

    good = {"source": "a", "target": "b", "n_texts": 240, "src_to_aligned_max": 2e-6, "prefix_leak_max": 1e-6,
            "aligned_to_target_mae": 20.12}
    line = pair_verdict(good, 1e-4, 1e-3)
    assert line.startswith("a -> b: THL conserves each unit's log-prob mass on these 240 texts")
    assert "the two models differ by 20.1 nats per unit on average" in line and "not THL's error" in line
    bad = pair_verdict({**good, "src_to_aligned_max": 0.3}, 1e-4, 1e-3)
    assert "THL loses mass on these texts" in bad
    rows = [{"source": "a", "target": "b", "denominator": name, "token_clip_rate": rate, "n_tokens": 900,
             "n_responses": 93} for name, rate in (("thl_aligned", 0.98), ("shuffled_prompt", 0.99),
                                                   ("broken_alignment", 1.0))]
    [ratio] = ratio_verdict(rows)
    assert ratio.startswith("a -> b: 98% of 900 tokens of 93 responses have an importance ratio outside 1 ± 0.2")
    assert "below its controls' 0.99 and 1.00" in ratio and "a ratio-weighted regime (PRP) carries little" in ratio
    [none] = ratio_verdict([{"source": "a", "target": "b", "denominator": "thl_aligned", "n_responses": 0}])
    assert none == "a -> b: no importance ratio: no text is over 8 characters, so none splits into a prompt and a " \
        "response (longer texts show them)"


def test_names_and_help_say_what_they_do(monkeypatch: pytest.MonkeyPatch) -> None:
    import typer

    from mutualrl.api import RunResult
    from mutualrl.cli import pools_cmd
    from mutualrl.cli.main import app

    result = RunResult(Path("r"), {}, {}, [{"kind": "train", "policy": "a"}, {"kind": "eval", "policy": "a"}])
    assert result.metric_rows("eval") == [{"kind": "eval", "policy": "a"}] == result.rows("eval")
    sweep = typer.main.get_command(app).commands["sweep"]  # type: ignore[attr-defined]
    [pool_help] = [param.help for param in sweep.params if "--pool" in param.opts]
    assert pool_help.endswith("Default: tiny, for every run of the sweep.") and "--resume" not in pool_help
    out = io.StringIO()
    monkeypatch.setattr(pools_cmd, "console", Console(file=out, width=60, force_terminal=True, color_system=None))
    words = "a long description of a pool that does not fit on one line of a narrow terminal at all"
    pools_cmd.print_rows([("p", "2 policies", "standalone", words)], 1)
    shown = out.getvalue()
    assert "…" not in shown and " ".join(shown.split()).endswith(words) and len(shown.splitlines()) > 1


def test_a_stop_in_a_sweep_gives_one_resume_instruction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep's ("the same command continues it"), not also the run's own ``train --resume`` line."""
    from types import SimpleNamespace

    from mutualrl.launch.rundir.summary import SWEEP_RUN_ENV, print_failure
    from mutualrl.launch.sweep import grid

    outcome = SimpleNamespace(reason="interrupted", failed_policy=None, extra={})

    def said() -> str:
        out = io.StringIO()
        print_failure(outcome, RunPaths(tmp_path), Console(file=out, width=200))
        return out.getvalue()

    assert "to go on from its start" in said()
    monkeypatch.setenv(SWEEP_RUN_ENV, "1")
    assert said() == "run stopped: interrupted\n"
    monkeypatch.delenv(SWEEP_RUN_ENV)
    started = []
    monkeypatch.setattr(grid.subprocess, "Popen", lambda command, **kwargs: started.append(kwargs) or object())
    spec = SweepSpec(folder=tmp_path, regimes=["sgt"], seeds=[1])
    grid.start_point(spec, spec.points()[0], False, 1, Console(file=io.StringIO()))
    assert started[0]["env"][SWEEP_RUN_ENV] == "1"

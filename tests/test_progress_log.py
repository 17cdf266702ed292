"""A run piped to a log shows its progress line by line (not only "step 0/N starting" until the final table)."""

from __future__ import annotations

import re

import pytest

from e2e_helpers import assert_ok


@pytest.mark.slow
@pytest.mark.parametrize("tiny_regime_2_steps", ["xgrpo"], indirect=True)
def test_piped_run_prints_a_line_for_every_step_of_every_policy(tiny_regime_2_steps):
    _, done = tiny_regime_2_steps  # 2 steps; stdout is a pipe, as in a cluster log
    assert_ok(done)
    for policy in ("tiny-bpe", "tiny-sp"):
        steps = {int(m) for m in re.findall(rf"{policy}: step (\d+)/2", done.stdout)}
        assert steps >= {1, 2}, done.stdout[-3000:]


@pytest.mark.slow  # over 5 s on the 2-core box: the full suite, not the fast tier
def test_steps_made_between_two_polls_still_get_a_line_each(tmp_path):
    """Polling status files alone skips steps a policy makes between two polls (a CI failure on a fast tiny
    run): the non-TTY lines come from the merged metrics rows, so every logged step of every policy shows."""
    import io
    import json
    import sys

    from rich.console import Console

    from mutualrl.launch.supervise.runner import PolicyProcess, PoolRunner, PoolSettings
    from mutualrl.run_folder import RunPaths

    paths = RunPaths(tmp_path / "run")
    (paths.root / "metrics").mkdir(parents=True)
    (paths.root / "status").mkdir()
    procs = []
    for policy in ("a", "b"):
        rows = "".join(json.dumps({"kind": "train", "policy": policy, "step": s, "reward_mean": s / 10}) + "\n"
                       for s in (1, 2, 3))
        status = json.dumps({"policy": policy, "phase": "finished", "step": 3, "max_steps": 3})
        script = (f"import pathlib; pathlib.Path({str(paths.policy_metrics(policy))!r}).write_text({rows!r}); "
                  f"pathlib.Path({str(paths.status(policy))!r}).write_text({status!r})")
        procs.append(PolicyProcess(policy, [sys.executable, "-c", script], {}, paths.log(policy)))
    out = io.StringIO()
    settings = PoolSettings(tmp_path / "see", stall_timeout_s=60, poll_s=5.0)  # one poll sees all 3 steps
    runner = PoolRunner(procs, paths, settings, console=Console(file=out, force_terminal=False, width=200))
    assert runner.run().ok
    for policy in ("a", "b"):
        assert re.findall(rf"^{policy}: step (\d+)/3  reward", out.getvalue(), re.M) == ["1", "2", "3"], out.getvalue()
    assert len(paths.metrics.read_text().splitlines()) == 6

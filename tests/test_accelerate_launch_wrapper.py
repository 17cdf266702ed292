"""The GPU policies' ``accelerate launch`` (mutualrl.host.accelerate_launch): stop signals left to the ranks, and no
working directory put on the ranks' import path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from mutualrl.host import accelerate_launch


def test_deepspeeds_launch_keeps_the_ranks_pythonpath_as_the_launcher_set_it(monkeypatch, tmp_path):
    """accelerate 1.15's prepare_deepspeed_cmd_env appends the working directory; here it is left off, and any other
    path is still appended as accelerate does."""
    from accelerate.utils import launch

    monkeypatch.setattr(launch, "env_var_path_add", launch.env_var_path_add)  # restored after the test
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "/mutualrl/src")
    assert launch.env_var_path_add("PYTHONPATH", os.path.abspath(".")) == f"/mutualrl/src:{tmp_path}"  # accelerate's
    accelerate_launch.keep_the_working_directory_off_the_ranks_path()
    assert launch.env_var_path_add("PYTHONPATH", os.path.abspath(".")) == "/mutualrl/src"
    assert launch.env_var_path_add("PYTHONPATH", "/elsewhere") == "/mutualrl/src:/elsewhere"
    # its call site reads the module's global, so the replacement is what it calls
    assert "env_var_path_add" in launch.prepare_deepspeed_cmd_env.__code__.co_names


@pytest.mark.slow
def test_a_stop_signal_leaves_the_one_rank_launch_waiting_for_its_rank(tmp_path):
    """accelerate's one-rank launch (simple_launcher) waits for its child: a SIGTERM to it must not end it while the
    rank saves. The stand-in rank ignores nothing: it exits 75 (stopped with a checkpoint) 1 s after its own SIGTERM."""
    rank = tmp_path / "rank.py"
    rank.write_text("import signal, sys, time\n"
                    "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1), sys.exit(75)))\n"
                    "print('ready', flush=True)\n"
                    "time.sleep(60)\n")
    launcher = subprocess.Popen([sys.executable, "-m", "mutualrl.host.accelerate_launch", "--num_processes", "1",
                                 "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--cpu",
                                 str(rank)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, start_new_session=True)
    while (line := launcher.stdout.readline()) and line.strip() != "ready":  # accelerate's notes about defaults
        pass
    assert line.strip() == "ready"
    os.killpg(launcher.pid, signal.SIGTERM)  # as Slurm: the launch process and its rank
    out, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 1, out  # accelerate's answer to a rank that exited non-zero, not -SIGTERM
    assert "returned non-zero exit status 75" in out, out

"""The Slurm examples (examples/slurm/*.sbatch, shown in docs/launch.md) start what `mutualrl train` plans.

Each script is run by bash as `sbatch` would run it on the job's first node, with stand-ins for `srun`,
`scontrol` and `mutualrl` on PATH: the stand-in `srun` records its options and command; the test then
runs that command once per node with that node's Slurm variables (SLURM_NODEID 0, 1, ...), and the
stand-in `mutualrl` records the arguments it got. Those arguments, with `--dry-run --save-plan`, must
give the same plan (placement, commands, rendezvous address, the machine it is for) and the same printed
plan as the same settings typed by hand. `--gpus 8` plans a simulated 8-GPU node on this CPU box.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mutualrl.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "slurm"
POLICIES = ["qwen2.5-math-1.5b", "qwen3-1.7b-base"]  # the 2qwen pool, in pool order

FAKE_SRUN = """#!{python}
import json, os, sys
with open(os.environ["FAKE_SRUN_RECORD"], "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ)}}) + "\\n")
"""
FAKE_MUTUALRL = """#!{python}
import json, os, sys
with open(os.environ["FAKE_MUTUALRL_RECORD"], "a") as f:
    f.write(json.dumps({{"node": os.environ.get("SLURM_NODEID"), "argv": sys.argv[1:]}}) + "\\n")
"""
FAKE_SCONTROL = """#!/bin/sh
[ "$1 $2" = "show hostnames" ] || {{ echo "fake scontrol: $*" >&2; exit 2; }}
for h in $FAKE_HOSTNAMES; do echo "$h"; sleep 0.05; done  # line by line, as a slow scontrol would
"""


def sbatch_directives(script: Path) -> dict[str, str]:
    """The `#SBATCH --key=value` lines of a script's header (sbatch stops reading them at the first command)."""
    directives: dict[str, str] = {}
    for line in script.read_text().splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if stripped.startswith("#SBATCH"):
            for word in shlex.split(stripped[len("#SBATCH"):], comments=True):
                key, _, value = word.lstrip("-").partition("=")
                directives[key] = value
    return directives


def split_srun(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """srun's own options (all written `--key=value` in the examples) and the command it starts."""
    options: dict[str, str] = {}
    for i, word in enumerate(argv):
        if not word.startswith("-"):
            return options, argv[i:]
        key, _, value = word.lstrip("-").partition("=")
        options[key] = value
    raise AssertionError(f"srun without a command: {argv}")


def submit(script: Path, tmp: Path, hostnames: list[str], *args: str, env: dict[str, str] | None = None):
    """Run the batch script as the job's first node would, then srun's command once per node.

    Returns the #SBATCH directives, srun's options, and each node's `mutualrl` arguments."""
    directives = sbatch_directives(script)
    bin_dir, venv = tmp / "fake-bin", tmp / "venv"
    bin_dir.mkdir(exist_ok=True)
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "bin" / "activate").write_text("# stand-in for the mutualrl environment\n")
    for name, text in (("srun", FAKE_SRUN), ("mutualrl", FAKE_MUTUALRL), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text.format(python=sys.executable))
        (bin_dir / name).chmod(0o755)
    srun_record, mutualrl_record = tmp / "srun.jsonl", tmp / "mutualrl.jsonl"
    job_env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp),
        "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": directives["job-name"],
        "SLURM_JOB_NODELIST": f"gpu[01-{len(hostnames):02d}]", "SLURM_JOB_NUM_NODES": str(len(hostnames)),
        "SLURM_NNODES": str(len(hostnames)), "SLURM_CPUS_PER_TASK": directives["cpus-per-task"],
        "SLURM_SUBMIT_DIR": str(tmp / "shared" / "repo"), "MUTUALRL_VENV": str(venv),
        "FAKE_HOSTNAMES": " ".join(hostnames), "FAKE_SRUN_RECORD": str(srun_record),
        "FAKE_MUTUALRL_RECORD": str(mutualrl_record), **(env or {}),
    }
    done = subprocess.run(["bash", str(script), *args], env=job_env, cwd=tmp, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    [srun] = [json.loads(line) for line in srun_record.read_text().splitlines()]
    options, command = split_srun(srun["argv"])
    assert options["ntasks-per-node"] == "1", "one launcher per node"
    for node, _ in enumerate(hostnames):  # srun starts the command on every node of the allocation
        node_env = {**srun["env"], "SLURMD_NODENAME": hostnames[node], "SLURM_NODEID": str(node),
                    "SLURM_PROCID": str(node), "SLURM_LOCALID": "0", "SLURM_STEP_NUM_NODES": str(len(hostnames))}
        ran = subprocess.run(command, env=node_env, cwd=tmp, capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, ran.stderr
    calls = [json.loads(line) for line in mutualrl_record.read_text().splitlines()]
    assert [c["node"] for c in calls] == [str(n) for n in range(len(hostnames))], "one mutualrl per node"
    return directives, options, [c["argv"] for c in calls]


FREE_GIB = 500.0
"""The free space every plan of this module sees: the disk's live figure moves as the suite's other tests write
beside it, and a plan's disk warning carries it (and whether it warns at all depends on it)."""


@pytest.fixture(autouse=True)
def fixed_free_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    from mutualrl.launch.plan import detect

    monkeypatch.setattr(detect, "free_disk_gib", lambda path: (FREE_GIB, "/shared"))


def dry_run(args: list[str], plan_file: Path) -> tuple[dict, str]:
    """`mutualrl <args> --dry-run --save-plan FILE`, in this process: the saved plan and the printed one."""
    result = CliRunner().invoke(app, [*args, "--dry-run", "--save-plan", str(plan_file)])
    assert result.exit_code == 0, result.output
    plan = json.loads(plan_file.read_text())
    assert plan["disk"]["free_gib"] == FREE_GIB  # the fixed figure, not the machine's
    # Lines joined: a long tmp folder (an xdist worker's) wraps the plan file's path mid-name.
    output = "".join(result.output.splitlines()).replace(str(plan_file), "PLAN_FILE")
    return plan, output


def launches_on(plan: dict, machine: int) -> dict[str, dict]:
    """{policy: its command on this machine} (`launches` lists a policy's commands on several machines)."""
    return {launch["policy"]: launch for policy in plan["policies"]
            for launch in (policy["launches"] or [policy["launch"]]) if launch["machine"] == machine}


def test_the_docs_show_each_example_as_it_is():
    """The two-node script is shown whole; the one-node script, its header and set-up the same, is named with the
    one line that differs (the docs do not repeat 20 lines)."""
    launch_md = (ROOT / "docs" / "launch.md").read_text()
    text = (EXAMPLES / "two-nodes.sbatch").read_text()
    assert f"```bash\n{text}```" in launch_md, "docs/launch.md does not show examples/slurm/two-nodes.sbatch as it is"
    one_node = (EXAMPLES / "one-node.sbatch").read_text()
    assert "`examples/slurm/one-node.sbatch`" in launch_md
    assert 'mutualrl train --pool 2qwen --regime sgt --gpus "$GPUS_PER_NODE" -o "$RUN_DIR"' in one_node
    for shared in ("#SBATCH --signal=TERM@1200", "RUN_DIR=${RUN_DIR:-$SLURM_SUBMIT_DIR/runs/2qwen-sgt}",
                   'source "${MUTUALRL_VENV:-$SLURM_SUBMIT_DIR/.venv}/bin/activate"'):
        assert shared in one_node and shared in text, shared


def test_one_node_example_runs_the_planned_commands(tmp_path):
    directives, options, [argv] = submit(EXAMPLES / "one-node.sbatch", tmp_path, ["gpu01"])
    assert directives["nodes"] == "1" and directives["ntasks-per-node"] == "1"
    assert options["gpus-per-node"] == directives["gpus-per-node"] == "8"
    run = tmp_path / "shared" / "repo" / "runs" / "2qwen-sgt"  # the default: runs/ under the submit folder
    script_plan, script_out = dry_run(argv, tmp_path / "script.json")
    hand_plan, hand_out = dry_run(["train", "--pool", "2qwen", "--regime", "sgt", "--gpus", "8", "-o", str(run)],
                                  tmp_path / "hand.json")
    assert script_plan == hand_plan and script_out == hand_out
    assert (script_plan["nodes"], script_plan["machine"], script_plan["run_dir"]) == (1, 0, str(run))
    here = launches_on(script_plan, 0)
    assert sorted(here) == sorted(POLICIES)
    assert [here[p]["env"]["CUDA_VISIBLE_DEVICES"] for p in POLICIES] == ["0,1,2,3", "4,5,6,7"]
    # Slurm's SIGTERM comes early enough for a step and the plan's checkpoints (launch/supervise/stop_grace.py)
    from mutualrl.launch.supervise.stop_grace import warning_s

    sig, _, seconds = directives["signal"].partition("@")
    save_gib = sum(p["checkpoint_gib"] for p in script_plan["disk"]["policies"])
    assert sig == "TERM" and int(seconds) >= warning_s(save_gib, 48 * 60) > 900, (seconds, save_gib)
    # the figure its comment quotes is the one the dry run prints (launch/plan/render.py)
    printed = re.search(r"#SBATCH --signal=TERM@(\d+)", script_out)
    assert printed is not None and f"({printed.group(1)} s)" in (EXAMPLES / "one-node.sbatch").read_text()


def test_two_nodes_example_starts_one_launcher_per_node_with_its_rank(tmp_path):
    shared_run = tmp_path / "shared" / "runs" / "2qwen-sgt"
    directives, options, argvs = submit(EXAMPLES / "two-nodes.sbatch", tmp_path, ["gpu01", "gpu02"],
                                        "--max-steps", "50", env={"RUN_DIR": str(shared_run)})
    assert directives["nodes"] == "2" and directives["ntasks-per-node"] == "1"
    assert options["gpus-per-node"] == directives["gpus-per-node"] == "8"
    for node, argv in enumerate(argvs):
        script_plan, script_out = dry_run(argv, tmp_path / f"script-{node}.json")
        hand = ["train", "--pool", "2qwen", "--regime", "sgt", "--gpus", "8", "--nodes", "2", "--machine-rank",
                str(node), "--main-address", "gpu01", "-o", str(shared_run), "--max-steps", "50"]
        hand_plan, hand_out = dry_run(hand, tmp_path / f"hand-{node}.json")
        assert script_plan == hand_plan and script_out == hand_out
        assert (script_plan["nodes"], script_plan["machine"]) == (2, node)
        assert script_plan["main_address"] == "gpu01"  # the first node of the allocation is machine 0
        assert script_plan["run_dir"] == str(shared_run)
        # one policy per node, on all 8 of its GPUs, meeting nobody else (no cross-machine rendezvous)
        [(policy, launch)] = launches_on(script_plan, node).items()
        assert policy == POLICIES[node]
        assert launch["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
        assert "--main_process_ip" not in launch["argv"]


def test_two_nodes_example_on_four_nodes_meets_at_the_first_node(tmp_path):
    """`sbatch --nodes=4 two-nodes.sbatch`: each policy spans two nodes; machine 1 meets machine 0 there."""
    node = 1
    shared_run = tmp_path / "shared" / "runs" / "2qwen-sgt"
    hosts = ["gpu01", "gpu02", "gpu03", "gpu04"]
    _, _, argvs = submit(EXAMPLES / "two-nodes.sbatch", tmp_path, hosts, env={"RUN_DIR": str(shared_run)})
    script_plan, script_out = dry_run(argvs[node], tmp_path / "script.json")
    hand_plan, hand_out = dry_run(["train", "--pool", "2qwen", "--regime", "sgt", "--gpus", "8", "--nodes", "4",
                                   "--machine-rank", str(node), "--main-address", "gpu01", "-o", str(shared_run)],
                                  tmp_path / "hand.json")
    assert script_plan == hand_plan and script_out == hand_out
    [(policy, launch)] = launches_on(script_plan, node).items()
    assert policy == POLICIES[0]
    argv = launch["argv"]
    assert argv[argv.index("--main_process_ip") + 1] == "gpu01"
    assert argv[argv.index("--machine_rank") + 1] == str(node)
    assert argv[argv.index("--num_machines") + 1] == "2"

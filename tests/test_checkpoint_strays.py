"""A checkpoint is exactly the files its manifest names, read in ASCII: what else its folder holds is said in one
line and changes nothing. A stray, empty rank file beside a complete checkpoint no longer makes a resume discard it
and start from step 0; a rank file naming a huge rank is named, never counted up to (it made resume loop with no
answer); a folder named ``checkpoint-٣`` (other digits) or ``checkpoint-03`` names no step, where it broke resume with
a missing-file error. A stray file a library would load by its name (full weights beside a LoRA adapter) makes the
checkpoint not what was saved: skipped, named. Hand-built checkpoints (``test_checkpoint_integrity``), no training."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mutualrl.launch.rundir.resume import checkpoint_steps, common_checkpoint, restart_command, saved_ranks
from mutualrl.ops.checkpoint_files import MANIFEST_NAME, checkpoint_problem, stray_files_line
from mutualrl.run_folder import RunPaths

from test_checkpoint_integrity import KINDS, build_checkpoint

STRAYS = {"full": "rng_state_7.pth", "sharded": "rng_state_1.pth", "lora": "rng_state_3.pth",
          "deepspeed": "global_step4/zero_pp_rank_5_mp_rank_00_optim_states.pt"}


def run_with(tmp_path: Path, kind: str, steps=(2, 4), manifest: bool = True) -> RunPaths:
    paths = RunPaths(tmp_path / "run")
    for step in steps:
        build_checkpoint(paths.policy_dir("a") / f"checkpoint-{step}", kind, step, manifest=manifest)
    return paths


@pytest.mark.parametrize("kind", KINDS)
def test_a_stray_empty_rank_file_beside_a_complete_checkpoint_is_said_and_resumed_past(tmp_path: Path,
                                                                                      kind: str) -> None:
    paths = run_with(tmp_path, kind)
    stray = paths.policy_dir("a") / "checkpoint-4" / STRAYS[kind]
    stray.write_bytes(b"")
    (stray.parent / "notes.txt~").write_text("an editor's backup")
    damaged: list[str] = []
    notes: list[str] = []
    assert common_checkpoint(paths, ["a"], damaged=damaged, notes=notes) == 4 and damaged == []
    (line,) = notes
    assert STRAYS[kind] in line and "notes.txt~" in line and "manifest does not list" in line and "\n" not in line
    ranks = saved_ranks(paths, ["a"])
    assert ranks.get("a", (2,))[0] == 2 if kind == "deepspeed" else "a" not in ranks  # the saved ranks, not 6


@pytest.mark.parametrize("manifest", [True, False])
def test_a_rank_file_naming_a_huge_rank_is_named_at_once(tmp_path: Path, manifest: bool) -> None:
    paths = run_with(tmp_path, "deepspeed", manifest=manifest)
    newest = paths.policy_dir("a") / "checkpoint-4"
    (newest / "rng_state_99999999999999.pth").write_bytes(b"")
    (newest / "global_step4" / "zero_pp_rank_88888888888_mp_rank_00_optim_states.pt").write_bytes(b"")
    started = time.monotonic()
    damaged: list[str] = []
    step = common_checkpoint(paths, ["a"], damaged=damaged)
    ranks = saved_ranks(paths, ["a"])
    assert time.monotonic() - started < 5
    assert ranks["a"][0] == 2  # counted from the rank files that make sense
    if manifest:
        assert step == 4 and damaged == [] and "99999999999999" in stray_files_line(newest)
    else:  # an older checkpoint: every file is judged, the stray one named in one line, the previous one taken
        assert step == 2 and len(damaged) == 1 and "is it a stray file?" in damaged[0] and "\n" not in damaged[0]


@pytest.mark.parametrize("name", ["checkpoint-٣", "checkpoint-03", "checkpoint-３", "checkpoint-3x"])
def test_a_folder_named_like_a_checkpoint_but_naming_no_step_is_said_not_resumed(tmp_path: Path, name: str) -> None:
    paths = run_with(tmp_path, "full", steps=(2,))
    build_checkpoint(paths.policy_dir("a") / name, "full", 3)
    assert checkpoint_steps(paths.policy_dir("a")) == {2}
    notes: list[str] = []
    assert common_checkpoint(paths, ["a"], notes=notes) == 2
    assert len(notes) == 1 and repr(name) in notes[0] and "naming no step" in notes[0]
    command, step = restart_command([type("P", (), {"name": "a", "argv": ["train"]})()], paths, "a")
    assert step == 2 and command[-1].endswith("checkpoint-2")


def test_a_rank_spelt_in_other_digits_names_no_rank(tmp_path: Path) -> None:
    paths = run_with(tmp_path, "full", steps=(2,), manifest=False)
    (paths.policy_dir("a") / "checkpoint-2" / "rng_state_٣.pth").write_bytes(b"")  # int() would read 3
    problem = checkpoint_problem(paths.policy_dir("a") / "checkpoint-2")  # no manifest: judged, not a torch file
    assert problem is not None and "rng_state_٣.pth" in problem and "rng_state_0" not in problem  # no world of 4 ranks inferred


@pytest.mark.parametrize(("kind", "stray"), [("lora", "model.safetensors"), ("full", "adapter_config.json"),
                                             ("full", "latest")])
def test_a_stray_file_a_library_loads_by_name_makes_the_checkpoint_not_what_was_saved(tmp_path: Path, kind: str,
                                                                                      stray: str) -> None:
    paths = run_with(tmp_path, kind)
    (paths.policy_dir("a") / "checkpoint-4" / stray).write_text("{}")
    damaged: list[str] = []
    assert common_checkpoint(paths, ["a"], damaged=damaged) == 2
    assert len(damaged) == 1 and stray in damaged[0] and "would load by its name" in damaged[0]


@pytest.mark.parametrize("files", [{"../outside": 3}, {"/etc/passwd": 3}, {"a/./b": 1}, {"trainer_state.json": "3"},
                                   {"trainer_state.json": True}, ["trainer_state.json"]])
def test_a_manifest_naming_what_no_checkpoint_file_can_be_is_refused(tmp_path: Path, files) -> None:
    paths = run_with(tmp_path, "full", steps=(4,))
    manifest = paths.policy_dir("a") / "checkpoint-4" / MANIFEST_NAME
    data = json.loads(manifest.read_text())
    data["files"] = files
    manifest.write_text(json.dumps(data))
    problem = checkpoint_problem(manifest.parent)
    assert problem is not None and "unreadable manifest" in problem and "\n" not in problem

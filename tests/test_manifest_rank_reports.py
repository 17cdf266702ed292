"""A checkpoint's manifest is built from what each rank reports it wrote, not from rank 0's listing alone: on a folder
several machines share, a machine's view lags (NFS's attribute cache), so rank 0 may not list another machine's ZeRO
shards yet, or see a stale size. The test double: one folder per machine's view of the same checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

from mutualrl.ops.checkpoint_files import (
    checkpoint_files,
    manifest_problem,
    merge_rank_reports,
    rank_of,
    read_manifest,
    write_manifest,
)

SHARDS = [f"global_step8/{kind}zero_pp_rank_{rank}_mp_rank_00_{what}.pt"
          for rank in (0, 1) for kind, what in (("", "model_states"), ("bf16_", "optim_states"))]


def saved_checkpoint(folder: Path) -> Path:
    """What two ranks (one a machine) of a ZeRO-3 policy leave: rank 0's files of the policy, each rank's own."""
    for name, size in {"latest": 12, "trainer_state.json": 300, "rng_state_0.pth": 40, "rng_state_1.pth": 41,
                       **{shard: 1000 + i for i, shard in enumerate(SHARDS)}}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"x" * size)
    return folder


def lagging_view(real: Path, view: Path, hidden: list[str] = (), stale: dict[str, int] | None = None) -> Path:
    """``real`` as a machine whose attribute cache lags sees it: ``hidden`` not listed yet, ``stale`` sizes."""
    shutil.copytree(real, view)
    for name in hidden:
        (view / name).unlink()
    for name, size in (stale or {}).items():
        (view / name).write_bytes(b"x" * size)
    return view


def test_each_ranks_files_come_from_its_own_report(tmp_path):
    real = saved_checkpoint(tmp_path / "checkpoint-8")
    rank1_files = ["rng_state_1.pth", *[s for s in SHARDS if "rank_1_" in s]]
    machine0 = lagging_view(real, tmp_path / "m0", hidden=rank1_files)  # rank 1's machine wrote them: not seen yet
    machine1 = lagging_view(real, tmp_path / "m1", stale={"trainer_state.json": 120})  # an older size cached
    reports = [checkpoint_files(machine0), checkpoint_files(machine1)]
    assert set(rank1_files) - set(reports[0])  # rank 0's listing alone misses them: the manifest would too
    merged = merge_rank_reports(reports)
    assert merged == checkpoint_files(real)  # every shard, each size as its writer saw it
    write_manifest(real, 8, merged)
    assert manifest_problem(real) is None and set(read_manifest(real)["files"]) >= set(rank1_files)
    one_view = lagging_view(real, tmp_path / "m0-again", hidden=rank1_files)
    write_manifest(one_view, 8)  # one process's own view, as a single machine writes it
    assert set(read_manifest(one_view)["files"]) == set(reports[0])


def test_the_rank_in_a_files_name():
    assert rank_of("rng_state_3.pth") == 3
    assert rank_of("global_step8/bf16_zero_pp_rank_12_mp_rank_00_optim_states.pt") == 12
    assert rank_of("global_step8/zero_pp_rank_0_mp_rank_00_model_states.pt") == 0
    assert rank_of("trainer_state.json") is None and rank_of("latest") is None and rank_of("rng_state.pth") is None

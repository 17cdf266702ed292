"""``--resume`` on another number of ranks: refused in the plan, before anything launches.

A DeepSpeed ZeRO checkpoint (stage 1-3) keeps each rank's slice of the optimizer state in a file of its own
(``global_stepN/[bf16_]zero_pp_rank_<r>_mp_rank_00_optim_states.pt``). DeepSpeed 0.19 loads it only on as many
data-parallel ranks as saved it: ``DeepSpeedEngine._load_zero_checkpoint`` raises ``ZeRORuntimeException``
("Automatic adjustment of ZeRO's optimizer state partitioning with a new world size is not currently supported")
when ``load_optimizer_states`` and the world sizes differ -- in every worker, after the launch, the model loaded.

DeepSpeed's universal checkpoint is no way round it here: it needs an offline conversion
(``deepspeed/checkpoint/ds_to_universal.py``, a new folder beside the checkpoint, several times the optimizer's
size), a ``latest_universal`` tag and ``checkpoint.load_universal`` in the DeepSpeed config of the resumed run
only -- while a restarted worker of that run (``see.max_restarts``) resumes from its own later checkpoint, which is
no universal one, and with ``load_universal`` set DeepSpeed refuses it (``latest_universal`` does not exist). So the
plan refuses, naming both counts and the policy, and the user resumes on the ranks the checkpoint was saved with.

A checkpoint without DeepSpeed (DDP, one process) holds the whole optimizer state in ``optimizer.pt`` and loads on
any rank count; it is not checked.
"""

from __future__ import annotations

from collections.abc import Mapping

from mutualrl.errors import PlacementError
from mutualrl.launch.plan.mwra import Placement, PolicyPlacement


def how_to_place(placed: PolicyPlacement, ranks: int) -> str:
    """What the user sets to give a policy ``ranks`` processes on its devices."""
    if placed.device_type == "cpu":
        return f"--set launch.cpu_processes={ranks}"
    return f"{ranks} GPUs for it (--gpus, --device-map)"


def check_resume_ranks(saved: Mapping[str, tuple[int, str]], placement: Placement) -> None:
    """Raise :class:`PlacementError` (one line naming the policy and both counts) when a policy's ZeRO checkpoint
    was saved by another number of ranks than ``placement`` gives it (module docstring). ``saved``: {policy:
    (ranks, checkpoint folder)}, :func:`mutualrl.launch.rundir.resume.saved_ranks` of the run folder."""
    for name, (ranks, folder) in saved.items():
        placed = placement.of(name)
        if placed.world_size == ranks:
            continue
        raise PlacementError(
            f"--resume: policy {name}'s DeepSpeed ZeRO checkpoint {folder} was saved by {ranks} ranks and this plan "
            f"runs it on {placed.world_size}; DeepSpeed loads its optimizer shards only on {ranks} ranks (its "
            f"universal checkpoint needs an offline conversion mutualrl does not do): resume with "
            f"{how_to_place(placed, ranks)}, or start a new run with --output-dir")

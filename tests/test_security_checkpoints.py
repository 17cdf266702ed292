"""A checkpoint is data: a torch file rewritten with an object whose ``__reduce__`` runs code (here: writes a marker
file) is refused by name, before a resume picks it and again when any library loads it; the marker never appears.
What checkpoints really hold (tensors, numpy's RNG state, DeepSpeed's loss scaler, ZeRO stage and fragment
addresses) still loads."""

from __future__ import annotations

import collections
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from mutualrl.errors import MutualRLError
from mutualrl.launch.rundir.resume import common_checkpoint
from mutualrl.run_folder import RunPaths
from mutualrl.ops.checkpoint_files import write_manifest

from test_checkpoint_integrity import build_checkpoint


class Hostile:
    """Unpickled, it runs code that writes ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"import pathlib; pathlib.Path({str(self.marker)!r}).write_text('ran')",)


def tamper(path: Path, marker: Path) -> None:
    """``path`` rewritten with the hostile object inside a plausible state; the manifest's sizes fixed after."""
    torch.save({"state": {0: {"step": torch.tensor(4.0)}}, "param_groups": [Hostile(marker)]}, path)


@pytest.mark.parametrize(("kind", "name"), [("full", "optimizer.pt"), ("full", "rng_state.pth"),
                                            ("deepspeed", "global_step4/zero_pp_rank_0_mp_rank_00_optim_states.pt"),
                                            ("deepspeed", "global_step4/zero_pp_rank_1_mp_rank_00_model_states.pt")])
def test_a_tampered_checkpoint_is_refused_by_name_before_resume(tmp_path: Path, kind: str, name: str) -> None:
    paths = RunPaths(tmp_path / "run")
    marker = tmp_path / "MARKER"
    for step in (2, 4):
        build_checkpoint(paths.policy_dir("a") / f"checkpoint-{step}", kind, step)
    folder = paths.policy_dir("a") / "checkpoint-4"
    tamper(folder / name, marker)
    write_manifest(folder, 4)  # sizes as they are now: the manifest does not catch it
    damaged: list[str] = []
    assert common_checkpoint(paths, ["a"], damaged=damaged) == 2
    assert len(damaged) == 1 and name in damaged[0] and "exec" in damaged[0] and "\n" not in damaged[0]
    assert not marker.exists()


def test_deepspeeds_checkpoint_engine_loads_plain_tensors_only(tmp_path: Path) -> None:
    """DeepSpeed's engine asks ``torch.load(weights_only=False)``; once a policy's model is loaded
    (``pools.loading.load_model``, every worker and ``distill``) that load is ``weights_only=True`` too."""
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

    from mutualrl.pools.loading import load_model

    load_model("builtin:tiny-bpe")
    marker = tmp_path / "MARKER"
    shard = tmp_path / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    tamper(shard, marker)
    with pytest.raises(MutualRLError) as err:
        TorchCheckpointEngine().load(str(shard), map_location="cpu")
    message = str(err.value)
    assert str(shard) in message and "exec" in message and "\n" not in message
    assert not marker.exists()


def test_what_real_checkpoints_hold_passes_both_checks(tmp_path: Path) -> None:
    """The state DeepSpeed's ZeRO optimizer saves (its loss scaler, stage, fragment addresses: read from
    ``deepspeed/runtime/zero/stage_1_and_2.py`` and from shards it wrote on this CPU) and transformers' RNG state."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    from mutualrl.pools.loading import load_model
    from mutualrl.trust.checkpoint_pickles import unsafe_global

    load_model("builtin:tiny-bpe")
    state = {
        "loss_scaler": LossScaler(1.0), "dynamic": DynamicLossScaler(2.0**16, 1000, 1.0, 2, False),
        "zero_stage": ZeroStageEnum.gradients, "param_shapes": [collections.OrderedDict(w=torch.Size([4, 4]))],
        "param_slice_mappings": [collections.OrderedDict(w=fragment_address(numel=16, start=0))],
        "base_optimizer_state": {"state": {0: {"exp_avg": torch.zeros(4, dtype=torch.bfloat16)}}},
        "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()},
        "dtypes": [torch.float32, torch.bfloat16, torch.int64], "weight": torch.nn.Parameter(torch.ones(2)),
    }
    path = tmp_path / "state.pt"
    torch.save(state, path)
    assert unsafe_global(path) is None
    loaded = torch.load(path, weights_only=False)  # asked unsafe, loaded as data: still equal
    assert loaded["zero_stage"] is ZeroStageEnum.gradients and loaded["param_slice_mappings"][0]["w"].numel == 16
    assert loaded["loss_scaler"].cur_scale == 1.0 and loaded["dynamic"].cur_scale == 2.0**16
    assert (loaded["rng"]["numpy"][1] == np.random.get_state()[1]).all() and loaded["dtypes"][1] is torch.bfloat16


def test_torchs_own_weights_only_list_passes_the_check_by_name_and_code_does_not() -> None:
    from torch._weights_only_unpickler import _get_allowed_globals

    from mutualrl.trust.checkpoint_pickles import is_safe_global

    assert [name for name in _get_allowed_globals() if not is_safe_global(name)] == []
    for name in ("builtins.exec", "builtins.eval", "os.system", "subprocess.Popen", "torch.load", "torch.hub.load",
                 "torch.jit.load", "torch.save", "pathlib.Path", "builtins.getattr", "runpy._run_code"):
        assert not is_safe_global(name), name

"""MWRA placement (paper Sec. "Multi-Worker Resource Allocation"): even split, device maps, errors, memory."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mutualrl.errors import PlacementError
from mutualrl.launch.plan.checks import check_memory, estimate_training_memory, param_count_for
from mutualrl.launch.plan.mwra import apportion, plan_placement


def names(n: int) -> list[tuple[str, float]]:
    return [(f"p{i}", 1.0) for i in range(n)]


def devices(placement) -> dict[str, tuple[int, ...]]:
    return {p.name: p.devices for p in placement.policies}


def test_two_policies_on_eight_gpus_get_four_each():
    placement = plan_placement(names(2), gpus=8)
    assert devices(placement) == {"p0": (0, 1, 2, 3), "p1": (4, 5, 6, 7)}
    assert [p.num_processes for p in placement.policies] == [4, 4]
    assert {p.device_type for p in placement.policies} == {"cuda"}
    assert placement.idle_gpus == [] and not placement.explicit


def test_one_policy_per_gpu_when_gpus_equal_policies():
    placement = plan_placement(names(4), gpus=4)
    assert devices(placement) == {"p0": (0,), "p1": (1,), "p2": (2,), "p3": (3,)}


def test_four_policies_on_eight_gpus_get_two_each():
    assert devices(plan_placement(names(4), gpus=8)) == {
        "p0": (0, 1),
        "p1": (2, 3),
        "p2": (4, 5),
        "p3": (6, 7),
    }


def test_uneven_split_gives_the_remainder_to_earlier_policies():
    assert [p.num_processes for p in plan_placement(names(3), gpus=8).policies] == [3, 3, 2]


def test_device_share_weights_the_split():
    placement = plan_placement([("small", 1.0), ("big", 2.0)], gpus=6)
    assert devices(placement) == {"small": (0, 1), "big": (2, 3, 4, 5)}


def test_tiny_share_still_gets_one_gpu():
    assert apportion([100.0, 1.0, 1.0], 4) == [2, 1, 1]
    assert apportion([1.0, 100.0], 2) == [1, 1]


def test_too_many_policies_fail_with_advice():
    with pytest.raises(PlacementError) as err:
        plan_placement(names(4), gpus=2)
    message = str(err.value)
    assert "cannot place 4 policies on 2 GPUs" in message
    assert "--device-map" in message and "more GPUs" in message


def test_cpu_placement_splits_cores():
    placement = plan_placement(names(2), gpus=0, cpu_cores=8)
    assert [(p.device_type, p.devices, p.num_processes, p.cpu_threads) for p in placement.policies] == [
        ("cpu", (), 1, 4),
        ("cpu", (), 1, 4),
    ]
    assert placement.warnings == []


def test_cpu_placement_at_least_one_thread_and_warns_on_oversubscription():
    placement = plan_placement(names(3), gpus=0, cpu_cores=2)
    assert [p.cpu_threads for p in placement.policies] == [1, 1, 1]
    assert any("compete for cores" in w for w in placement.warnings)


def test_cpu_threads_follow_device_share_in_a_lock_step_pool():
    """Issue 40: the policy whose step costs more gets more cores; equal shares split evenly (unchanged); GPU
    placement does not look at it."""
    placement = plan_placement([("gemma", 1.5), ("smollm2", 1.0)], gpus=0, cpu_cores=16)
    assert [p.cpu_threads for p in placement.policies] == [9, 6] and placement.warnings == []
    placement = plan_placement([("gemma", 1.5), ("smollm2", 1.0)], gpus=0, cpu_cores=2)
    assert [p.cpu_threads for p in placement.policies] == [1, 1]  # at least one each: nothing to split on 2 cores
    assert [p.cpu_threads for p in plan_placement(names(3), gpus=0, cpu_cores=16).policies] == [5, 5, 5]
    gpu = plan_placement([("gemma", 1.5), ("smollm2", 1.0)], gpus=2, cpu_cores=16)
    assert [(p.devices, p.cpu_threads) for p in gpu.policies] == [((0,), 8), ((1,), 8)]


def test_threads_per_policy_overrides_the_split():
    placement = plan_placement(names(2), gpus=0, cpu_cores=16, threads_per_policy=3)
    assert [p.cpu_threads for p in placement.policies] == [3, 3]


def test_device_map_places_each_policy_where_told():
    placement = plan_placement(names(2), gpus=8, device_map={"p0": [0], "p1": [5, 6]})
    assert devices(placement) == {"p0": (0,), "p1": (5, 6)}
    assert placement.explicit
    assert placement.idle_gpus == [1, 2, 3, 4, 7]
    assert any("not used" in w for w in placement.warnings)


def test_device_map_overlap_is_allowed_with_a_warning():
    placement = plan_placement(names(2), gpus=2, device_map={"p0": [0, 1], "p1": [1]})
    assert devices(placement) == {"p0": (0, 1), "p1": (1,)}
    assert any("GPU 1 is shared by p0, p1" in w for w in placement.warnings)


def test_device_map_lets_more_policies_than_gpus_share():
    placement = plan_placement(names(4), gpus=2, device_map={"p0": [0], "p1": [0], "p2": [1], "p3": [1]})
    assert [p.num_processes for p in placement.policies] == [1, 1, 1, 1]


@pytest.mark.parametrize(
    ("device_map", "expected"),
    [
        ({"p0": [0]}, "does not place 'p1'"),
        ({"p0": [0], "p1": [8]}, "only ids 0..7 exist"),
        ({"p0": [0], "p1": []}, "gives 'p1' no GPU"),
        ({"p0": [0, 0], "p1": [1]}, "lists a GPU twice"),
        ({"p0": [0], "p1": [1], "ghost": [2]}, "'ghost'"),
        ({"p0": [-1], "p1": [1]}, "only ids 0..7"),
    ],
)
def test_bad_device_maps_name_the_problem(device_map, expected):
    with pytest.raises(PlacementError, match=expected.replace("(", r"\(").replace(".", r"\.")):
        plan_placement(names(2), gpus=8, device_map=device_map)


def test_device_map_without_gpus_fails():
    with pytest.raises(PlacementError, match="no GPU is available"):
        plan_placement(names(2), gpus=0, device_map={"p0": [0], "p1": [1]})


def test_world_size_check_shrinks_shares_and_gives_the_freed_gpus_back():
    # Only even world sizes are acceptable here: 3+3+2 shrinks to 2+2+2, and the two freed GPUs go to one
    # policy instead of idling (issue 38: 3qwen left two of eight GPUs idle).
    placement = plan_placement(names(3), gpus=8, world_size_ok=lambda _n, k: k % 2 == 0)
    assert [p.num_processes for p in placement.policies] == [4, 2, 2]
    assert placement.idle_gpus == []
    assert sum("does not divide" in w for w in placement.warnings) == 2
    assert not any("left idle" in w for w in placement.warnings)


def test_gpus_no_batch_can_use_stay_idle_with_a_warning():
    placement = plan_placement(names(2), gpus=8, world_size_ok=lambda _n, k: k in (1, 2))
    assert [p.num_processes for p in placement.policies] == [2, 2]
    assert placement.idle_gpus == [4, 5, 6, 7]
    assert any("4 GPU(s) left idle" in w for w in placement.warnings)


def test_freed_gpus_go_to_the_most_under_served_share():
    # shares 1.5 : 1.7 : 4 of 8 GPUs -> 2, 2, 4 (the largest model gets the most)
    placement = plan_placement([("a", 1.5), ("b", 1.7), ("c", 4.0)], gpus=8, world_size_ok=lambda _n, k: k in (1, 2, 4))
    assert [p.num_processes for p in placement.policies] == [2, 2, 4]


def test_gpus_none_must_be_detected_by_the_caller():
    with pytest.raises(ValueError, match="detect it at the call site"):
        plan_placement(names(2), gpus=None)


@given(
    shares=st.lists(st.floats(min_value=0.05, max_value=20.0), min_size=1, max_size=8),
    extra=st.integers(min_value=0, max_value=24),
)
def test_even_split_properties(shares, extra):
    gpus = len(shares) + extra
    placement = plan_placement([(f"p{i}", s) for i, s in enumerate(shares)], gpus=gpus)
    blocks = [p.devices for p in placement.policies]
    assert all(len(b) >= 1 for b in blocks)
    flat = [d for b in blocks for d in b]
    assert sorted(flat) == list(range(gpus))  # every GPU used exactly once
    assert all(list(b) == list(range(b[0], b[0] + len(b))) for b in blocks)  # contiguous
    # Largest remainder: nobody is more than one GPU away from its quota, unless the one-GPU floor lifted it.
    total = sum(shares)
    for share, block in zip(shares, blocks, strict=True):
        quota = gpus * share / total
        assert len(block) < quota + 1 or len(block) == 1


def test_param_count_sources():
    assert param_count_for("Qwen/Qwen2.5-Math-1.5B") == (1.54e9, "model card")
    assert param_count_for("ministral/Ministral-3b-instruct") == (3.32e9, "model card")  # counted from its config
    assert param_count_for("org/Ministral-3b-instruct-copy") == (3e9, "model name")
    assert param_count_for("org/Llama-3.2-3B-Instruct-copy") == (3e9, "model name")
    assert param_count_for("org/some-model") == (None, "unknown")  # no card, no size in the name, not on disk
    assert param_count_for("builtin:tiny-bpe") == (3432896.0, "weights")  # built by the set-up: its safetensors header
    assert param_count_for("org/some-model", hint=1e6) == (1e6, "hint")


def test_memory_estimate_follows_zero_accounting():
    p = 1e9
    ddp = estimate_training_memory("a", p, device_type="cuda", num_devices=4, zero_stage=0)
    assert ddp.bytes_per_device == 16 * p
    z2 = estimate_training_memory("a", p, device_type="cuda", num_devices=4, zero_stage=2)
    assert z2.bytes_per_device == 2 * p + (2 + 12) * p / 4
    z3 = estimate_training_memory("a", p, device_type="cuda", num_devices=4, zero_stage=3, reference_model=True)
    assert z3.bytes_per_device == 16 * p / 4 + 2 * p / 4
    cpu = estimate_training_memory("a", p, device_type="cpu", num_devices=1, zero_stage=3)
    assert cpu.bytes_per_device == 16 * p
    lora = estimate_training_memory("a", p, device_type="cuda", num_devices=1, zero_stage=0, lora=True)
    assert lora.bytes_per_device == 4 * p  # without DeepSpeed the frozen weights are fp32 (TRL's loading dtype)
    lora_z3 = estimate_training_memory("a", p, device_type="cuda", num_devices=2, zero_stage=3, lora=True)
    assert lora_z3.bytes_per_device == 2 * p / 2


def test_memory_check_errors_warns_and_passes():
    placement = plan_placement(names(2), gpus=2)
    big = {n: estimate_training_memory(n, 4e9, device_type="cuda", num_devices=1, zero_stage=0) for n in ("p0", "p1")}
    with pytest.raises(PlacementError, match="GPU 0: p0 59.6 GiB") as err:
        check_memory(placement, big, gpu_memory_gib=48.0)
    assert "launch.deepspeed=zero3" in str(err.value) and "LoRA" in str(err.value)
    assert check_memory(placement, big, gpu_memory_gib=80.0) == []
    near = check_memory(placement, big, gpu_memory_gib=72.0)
    assert len(near) == 2 and "activations may not fit" in near[0]
    # vLLM keeping half of each GPU makes it not fit any more.
    with pytest.raises(PlacementError):
        check_memory(placement, big, gpu_memory_gib=80.0, reserved_fraction={"p0": 0.5})
    # Unknown GPU memory: no check.
    assert check_memory(placement, big, gpu_memory_gib=None) == []


def test_memory_check_adds_up_policies_sharing_a_gpu():
    placement = plan_placement(names(2), gpus=1, device_map={"p0": [0], "p1": [0]})
    est = {n: estimate_training_memory(n, 1.5e9, device_type="cuda", num_devices=1, zero_stage=0) for n in ("p0", "p1")}
    assert check_memory(placement, {"p0": est["p0"]}, gpu_memory_gib=40.0) == []
    with pytest.raises(PlacementError, match=r"p0 22\.4 \+ p1 22\.4 GiB"):
        check_memory(placement, est, gpu_memory_gib=40.0)


def test_memory_check_on_cpu_sums_ram():
    placement = plan_placement(names(2), gpus=0, cpu_cores=2)
    est = {n: estimate_training_memory(n, 1e9, device_type="cpu", num_devices=1, zero_stage=0) for n in ("p0", "p1")}
    with pytest.raises(PlacementError, match="RAM"):
        check_memory(placement, est, gpu_memory_gib=None, ram_gib=24.0)
    assert check_memory(placement, est, gpu_memory_gib=None, ram_gib=64.0) == []

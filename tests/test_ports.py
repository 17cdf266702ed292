"""Two runs on one machine pick rendezvous ports that are free and stay theirs: each launcher claims a block before
it plans and holds it until its run ends (launch/ports.py)."""

from __future__ import annotations

import socket

import pytest
from e2e_helpers import free_ports

from mutualrl.config.loader import load_run_config
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.launch_plan import make_launch_plan
from mutualrl.launch.ports import claim_ports, claim_run_ports


def test_two_launchers_claim_disjoint_blocks_and_a_closed_claim_is_free_again():
    first = free_ports(8)
    with claim_ports(first, 2) as one, claim_ports(first, 2) as two:
        assert (one.first, two.first) == (first, first + 2)
    with claim_ports(first, 2) as again:  # both released
        assert again.first == first


def test_a_port_another_program_listens_on_is_skipped():
    first = free_ports(8)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", first + 1))
        listener.listen()
        with claim_ports(first, 2) as claim:
            assert claim.first == first + 2


def test_a_fixed_block_that_is_taken_is_refused_in_one_line():
    first = free_ports(4)
    with claim_ports(first, 1), pytest.raises(PlacementError) as err:
        claim_ports(first, 2, fixed=True)
    assert "\n" not in str(err.value) and f"at {first}-{first + 1}" in str(err.value)
    assert "launch.main_process_port" in str(err.value)


def test_the_plan_uses_the_claimed_block(tmp_path):
    config = load_run_config("tiny", overrides=[f"launch.main_process_port={free_ports(8)}"]).config
    base = config.launch.main_process_port
    with claim_ports(base, 1):  # another run holds the recipe's first port
        planned, claim = claim_run_ports(config)
        with claim:
            plan = make_launch_plan(planned, tmp_path / "run", gpus=0, cpu_cores=2, dry_run=True)
    assert claim.first == base + 1 and config.launch.main_process_port == base  # the recipe is left as it was
    assert [p.main_process_port for p in plan.policies] == [base + 1, base + 2]


# Two DeepSpeed CPU runs started at once on the same recipe port both finish: tests/test_train_e2e.py
# test_zero3_on_cpu_trains_the_tiny_pool (a ZeRO-2 run beside the tiny pool's ZeRO-3 run: one launch fewer).

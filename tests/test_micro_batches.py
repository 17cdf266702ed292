"""The rows that carry a rescue are dealt evenly over a generation's micro-batches (training/micro_batches.py): at
most ``ceil(carried / micro-batches)`` each, what the memory plan counts (launch/plan/bounds.py), where TRL 1.16's
shuffle alone can put them all in one."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from mutualrl.regimes.core.batch_rows import attached_row_flags
from mutualrl.training.micro_batches import deal_attached_rows, dealt_order


def test_dealt_order_by_hand():
    carried = torch.tensor([True, True, False, True, False, False])  # 3 carried of 6, 3 parts of 2
    assert dealt_order(carried, 3).tolist() == [0, 2, 1, 4, 3, 5]
    assert dealt_order(carried, 2).tolist() == [0, 3, 2, 1, 4, 5]  # part 0: carried 0 and 3; part 1: carried 1
    assert dealt_order(torch.zeros(4, dtype=torch.bool), 2).tolist() == [0, 1, 2, 3]


def batch(rows: int, carried: list[int], start: int = 0) -> dict:
    """``rows`` rows of TRL's batch (row ids in ``completion_ids``), a rescue attached to ``carried``."""
    weight = torch.zeros(rows)
    weight[carried] = 0.5
    mask = torch.zeros(rows, 3, dtype=torch.long)
    mask[carried] = 1
    ids = torch.arange(start, start + rows)  # [rows]
    return {"completion_ids": ids[:, None].repeat(1, 2), "completion_mask": torch.ones(rows, 2, dtype=torch.long),
            "advantages": ids.float(), "num_items_in_batch": torch.tensor(7), "old_per_token_logps": None,
            "sgt_completion_ids": ids[:, None].repeat(1, 3) * mask, "sgt_completion_mask": mask, "sgt_weight": weight,
            "names": [f"row{i}" for i in ids.tolist()]}


def test_every_rescued_row_in_one_micro_batch_is_dealt_one_to_each():
    chunks = [batch(4, [0, 1, 3]), batch(4, [], start=4), batch(4, [], start=8)]
    dealt = deal_attached_rows(chunks)
    assert [int(attached_row_flags(c).sum()) for c in dealt] == [1, 1, 1]
    for chunk in dealt:  # every row's tensors moved together
        ids = chunk["completion_ids"][:, 0]  # [4]
        assert torch.equal(chunk["advantages"], ids.float())
        assert chunk["names"] == [f"row{i}" for i in ids.tolist()]
        assert torch.equal(chunk["sgt_completion_ids"], ids[:, None].repeat(1, 3) * chunk["sgt_completion_mask"])
        assert int(chunk["num_items_in_batch"]) == 7 and chunk["old_per_token_logps"] is None
    assert sorted(torch.cat([c["completion_ids"][:, 0] for c in dealt]).tolist()) == list(range(12))
    assert [c["completion_ids"][:, 0].tolist() for c in dealt] == [[0, 2, 4, 5], [1, 6, 7, 8], [3, 9, 10, 11]]


def test_two_rescue_prefixes_count_as_one_flag_per_row():
    chunks = [batch(4, [0, 1]), batch(4, [], start=4)]
    for chunk, carried in zip(chunks, ([2], [0]), strict=True):  # a second regime's rescue on other rows
        chunk["bytekd_completion_mask"] = torch.zeros(4, 2, dtype=torch.long)
        chunk["bytekd_weight"] = torch.zeros(4)
        chunk["bytekd_weight"][carried] = 1.0
    assert attached_row_flags(chunks[0]).tolist() == [True, True, True, False]
    dealt = deal_attached_rows(chunks)
    assert [int(attached_row_flags(c).sum()) for c in dealt] == [2, 2]


def test_a_batch_already_even_or_with_nothing_attached_is_left_as_it_is():
    even = [batch(4, [0]), batch(4, [2], start=4)]
    assert deal_attached_rows(even) is even
    plain = [{"completion_ids": torch.zeros(2, 1)}, {"completion_ids": torch.ones(2, 1)}]
    assert deal_attached_rows(plain) is plain
    one = [batch(4, [0, 1, 2])]
    assert deal_attached_rows(one) is one
    images = [{**batch(4, [0, 1, 2]), "pixel_values": torch.zeros(6, 3)}, batch(4, [], start=4)]  # 6 patches
    assert deal_attached_rows(images) is images  # image tensors are not one row per completion


def test_trls_prepare_inputs_shuffles_then_the_trainer_deals(monkeypatch):
    """Through TRL 1.16's own ``_prepare_inputs`` (its shuffle and split): a generation of 12 rows in 3 micro-batches
    whose 3 rescued rows TRL's shuffle puts 2 in one micro-batch under this seed; the trainer's micro-batches hold one
    each, and the next two steps are served from the same dealt buffer without a new generation."""
    from trl import GRPOTrainer

    from mutualrl.training.trainer import MutualGRPOTrainer

    generated = []

    def generate(self, inputs):
        generated.append(inputs)
        return batch(12, [0, 1, 2])

    monkeypatch.setattr(MutualGRPOTrainer, "_generate_and_score_completions", generate)  # what TRL's calls
    trainer = object.__new__(MutualGRPOTrainer)
    trainer.__dict__.update(model=SimpleNamespace(training=True), args=SimpleNamespace(steps_per_generation=3),
                            num_iterations=1, _step=0, _buffered_inputs=None)
    torch.manual_seed(3)
    trls = GRPOTrainer._prepare_inputs(trainer, "prompts")  # TRL's alone: its buffer as its shuffle left it
    assert max(int(attached_row_flags(c).sum()) for c in trainer._buffered_inputs) == 2
    assert trls is trainer._buffered_inputs[0]
    trainer._buffered_inputs = None
    torch.manual_seed(3)
    served = []
    for step in range(3):
        trainer._step = step
        served.append(trainer._prepare_inputs("prompts"))
    assert len(generated) == 2  # TRL's own call above, then one generation for the trainer's three steps
    assert [int(attached_row_flags(c).sum()) for c in served] == [1, 1, 1]
    assert sorted(torch.cat([c["completion_ids"][:, 0] for c in served]).tolist()) == list(range(12))

"""regimes/core/loss_types.py's table against TRL 1.16's own source: the same loss types as GRPOConfig names, the
clipped ones as ``_compute_loss``'s clipped branch lists, each normaliser as its reduction branch computes; and the
places that branch on a loss type read the table. (``aggregate_loss`` equals TRL's loss for every loss type:
tests/test_sharing_gradients.py.)"""

from __future__ import annotations

import inspect
import re

from trl import GRPOConfig, GRPOTrainer

from mutualrl.regimes.core.loss_types import LOSS_TYPES, loss_type, loss_types_where

SOURCE = inspect.getsource(GRPOTrainer._compute_loss)

#: The first line of each of TRL's reduction branches -> the normaliser it is.
REDUCTIONS = {
    "loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()": "row_tokens",
    "loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)": "batch_tokens",
    "loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length)": "max_length",
    'normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes': "generation_tokens",
    "loss = (per_token_loss * mask).sum(-1).mean()": "rows",
}


def branch_names(condition: str) -> list[str]:
    """The loss types a TRL ``if``/``elif`` condition names (``in [...]`` or ``== "..."``)."""
    return re.findall(r'"(\w+)"', condition)


def test_the_table_has_every_loss_type_trl_names():
    help_text = GRPOConfig.__dataclass_fields__["loss_type"].metadata["help"]
    supported = re.search(r"Supported values are (.*?)\.", help_text).group(1)
    assert sorted(re.findall(r"'(\w+)'", supported)) == sorted(LOSS_TYPES)


def test_the_clipped_loss_types_are_trls_clipped_branch():
    branch = re.search(r"elif self\.loss_type in (\[.*?\]):\n\s+coef_2 = torch\.clamp", SOURCE)
    assert sorted(branch_names(branch.group(1))) == sorted(loss_types_where(clipped=True))


def test_each_normaliser_is_what_trls_reduction_branch_computes():
    reduction = SOURCE[SOURCE.index('mode = "train" if self.model.training'):]
    reduction = reduction[:reduction.index("Unknown loss type")]  # the reduction's branches, not the metrics' after
    branches = re.findall(r"(?:if|elif) (self\.loss_type (?:in \[.*?\]|== \"\w+\")):\n\s+(?:#.*\n\s+)*(.+)", reduction)
    found = {name: REDUCTIONS[first.strip()] for condition, first in branches for name in branch_names(condition)}
    assert found == {name: kind.normaliser for name, kind in LOSS_TYPES.items()}
    assert {kind.unit for kind in LOSS_TYPES.values() if kind.normaliser == "row_tokens"} == {"sequence"}


def test_the_places_that_branch_on_a_loss_type_read_the_table():
    from mutualrl.regimes.hacpo.adapter import TOKEN_NORMALISED
    from mutualrl.regimes.prp.maths import CLIPPED_LOSSES

    assert TOKEN_NORMALISED == ("dapo", "cispo", "vespo")
    assert CLIPPED_LOSSES == ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
    assert loss_type("grpo").unit == "sequence" and loss_type("dapo").normaliser == "generation_tokens"
    try:
        loss_type("ppo")
    except ValueError as err:
        assert "unknown loss_type 'ppo'" in str(err)
    else:
        raise AssertionError("an unknown loss type was classified")

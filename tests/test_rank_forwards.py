"""The cover enumeration's forwards kept in step across a policy's ranks (regimes/core/rank_forwards.py).

Two ranks are simulated by two threads sharing a fake process group that enforces ZeRO-3's contract: every forward
of the model is a collective (DeepSpeed all-gathers each submodule's parameters as its forward starts, and again in
a gradient forward's backward), so the ranks' collectives must pair up one by one, each of the same kind; the group
fails at the first pair that does not. Each rank holds texts of different lengths (a different number of
tokenizations to forward): the ranks end with the same sequence of collectives, and every value each computes is
the one rank alone computes on its texts; so under DDP, whose wrapper broadcasts the module's buffers before a
forward that follows one with a gradient (the fake keeps DDP's ``require_forward_param_sync`` as torch does). Without
the equaliser, or with DDP read from ``will_sync_module_buffers()``, the group fails (the fake enforces something).
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch
from bytekd_worlds import ByteChainModel, TableModel

from mutualrl.regimes.bytekd import exact
from mutualrl.regimes.core import cover_scoring, rank_forwards
from mutualrl.regimes.core.cover_scoring import CoverLimits, judge_next_bytes, text_logps
from mutualrl.regimes.core.next_bytes import END
from mutualrl.regimes.core.written_bytes import policy_byte_logps

PIECES = [b"1", b"2", b"12", b""]  # "12" one token or two: a text has as many tokenizations as its "12"s allow
ALPHABET = b"12"
EXACT = CoverLimits(0.0, 0)
TOKENS = {0: [(2, 2), (0, 1, 0)], 1: [(0,)]}  # rank 0: texts of many tokenizations; rank 1: one of one


class Mismatch(AssertionError):
    """The ranks' collectives did not pair up: under ZeRO-3 a hang, or a wrong result."""


class FakeGroup:
    """A process group of ``size`` threads: each collective waits for every rank, checks that all called the same
    kind, and hands each the values of all. ``log[rank]``: the kinds of its collectives, in order."""

    def __init__(self, size: int = 2):
        self.barrier = threading.Barrier(size, timeout=60)
        self.slots: list = [None] * size
        self.log: list[list[str]] = [[] for _ in range(size)]

    def collective(self, rank: int, kind: str, value=None) -> list:
        self.slots[rank] = (kind, value)
        self.log[rank].append(kind)
        self.barrier.wait()
        kinds, values = [k for k, _ in self.slots], [v for _, v in self.slots]
        self.barrier.wait()  # every rank has read the slots before any writes the next
        if len(set(kinds)) != 1:
            raise Mismatch(f"collective {len(self.log[rank])}: the ranks called {kinds}")
        return values


class RankAccelerator:
    """accelerate's view of one rank of the fake group: ``reduce`` and ``gather`` as collectives."""

    def __init__(self, group: FakeGroup | None, rank: int):
        self.group, self.rank = group, rank
        self.num_processes = 1 if group is None else len(group.log)
        self.is_main_process = rank == 0
        self.device = torch.device("cpu")

    def reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        assert reduction == "sum"
        return torch.stack(self.group.collective(self.rank, "reduce", tensor.clone())).sum(0)

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return torch.cat(self.group.collective(self.rank, "gather", tensor.clone()))


class Backward(torch.autograd.Function):
    """The identity whose backward is a collective: ZeRO-3 gathers the parameters again in each gradient forward's
    backward."""

    @staticmethod
    def forward(ctx, x, accelerator):
        ctx.accelerator = accelerator
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        accelerator = ctx.accelerator
        if accelerator.group is not None:
            accelerator.group.collective(accelerator.rank, "backward")
        return grad, None


class RankTrainer:
    """What the enumeration and byte-kd's exact term read of a trainer, one rank of a ZeRO-3 policy over a table
    model (test-only): each ``completion_logits`` call is a collective forward, counted by whether it has a
    gradient."""

    def __init__(self, model: TableModel, theta: torch.Tensor, group: FakeGroup | None, rank: int,
                 syncs_buffers: bool = False):
        self.world, self.theta = model, theta
        self.accelerator = RankAccelerator(group, rank)
        self.model = SimpleNamespace(config=SimpleNamespace(vocab_size=len(PIECES)))
        self.ddp = syncs_buffers
        if syncs_buffers:  # DDP's wrapper with buffers to broadcast (torch's DistributedDataParallel's fields)
            self.model.forward_sync_buffers, self.model.modules_buffers = True, [torch.zeros(1)]
            self.model.require_forward_param_sync = True
            self.model.will_sync_module_buffers = lambda: (self.model.require_forward_param_sync
                                                           and self.model.forward_sync_buffers)
        self.processing_class = SimpleNamespace(eos_token_id=model.eos, pad_token_id=model.eos)
        self.eos_token_ids = [model.eos]
        self.forwards = {"no grad": 0, "grad": 0}
        cover_scoring._PIECES[(id(self.processing_class), len(PIECES))] = model.token_pieces

    def completion_logits(self, model, prompt_ids, prompt_mask, ids, mask) -> torch.Tensor:
        grad = torch.is_grad_enabled()
        self.forwards["grad" if grad else "no grad"] += 1
        if self.accelerator.group is not None and not self.ddp:
            self.accelerator.group.collective(self.accelerator.rank, "forward")
        if self.ddp:  # DDP's _pre_forward: broadcast where the last forward had a gradient; _post_forward sets it
            if self.accelerator.group is not None and self.model.will_sync_module_buffers():
                self.accelerator.group.collective(self.accelerator.rank, "broadcast buffers")
            self.model.require_forward_param_sync = grad
        rows = []
        for row in range(ids.shape[0]):
            n = int(mask[row].sum()) - 1
            history = tuple(int(v) for v in ids[row, :n])
            states = [self.world.logps(history[:p], self.theta) for p in range(n + 1)]
            rows.append(torch.stack(states + [torch.zeros(len(PIECES))] * (ids.shape[1] - n - 1)))  # [W, V]
        out = torch.stack(rows)  # [N, W, V] the table's log-probs as logits
        return Backward.apply(out, self.accelerator) if grad and not self.ddp else out  # DDP: one all-reduce a step

    def aggregate_loss(self, per_token: torch.Tensor, mask: torch.Tensor, inputs) -> torch.Tensor:
        return (per_token * mask).sum() / mask.sum().clamp(min=1)


def batch(model: TableModel, teacher: ByteChainModel, rows: list[tuple[int, ...]],
          taught: bool = True) -> dict[str, torch.Tensor]:
    """byte-kd's exact inputs for the learner samples ``rows`` (each + EOS), every offset taught by ``teacher`` (none
    where not ``taught``: every row gated off)."""
    width = max(len(tokens) for tokens in rows) + 1
    texts = [model.text_of(tokens) for tokens in rows]
    offsets = max(len(text) for text in texts) + 1
    ids = torch.full((len(rows), width), model.eos)  # [B, C]
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # [B, C]
    logps = torch.zeros((len(rows), 1, offsets, 3))  # [B, 1, O, 3]
    weights = torch.zeros((len(rows), 1, offsets))  # [B, 1, O]
    for i, (tokens, text) in enumerate(zip(rows, texts, strict=True)):
        ids[i, :len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        mask[i, :len(tokens) + 1] = 1
        logps[i, 0, :len(text) + 1] = torch.stack([teacher.logps(teacher.tokens_of(text[:o]))
                                                   for o in range(len(text) + 1)])  # [n + 1, 3]
        weights[i, 0, :len(text) + 1] = float(taught)
    return {"prompt_ids": torch.zeros((len(rows), 1), dtype=torch.long),
            "prompt_mask": torch.ones((len(rows), 1), dtype=torch.long), "completion_ids": ids,
            "completion_mask": mask, "bytekd_ids": torch.tensor([*ALPHABET, END]).expand(len(rows), 1, offsets, 3),
            "bytekd_logps": logps, "bytekd_weights": weights}


def rank_work(trainer: RankTrainer, model: TableModel, teacher: ByteChainModel, rows: list[tuple[int, ...]],
              taught: bool = True) -> dict:
    """Everything that forwards a number of times that depends on the rows, as a rank runs it in a step: the judge's
    exact distributions and texts' probabilities, the written bytes' log-probs, byte-kd's exact term and its
    backward."""
    texts = [model.text_of(tokens) for tokens in rows]
    prompts = torch.zeros((len(rows), 1), dtype=torch.long), torch.ones((len(rows), 1), dtype=torch.long)
    judged = judge_next_bytes(trainer, *prompts, texts, [list(t) for t in rows], 3, EXACT)
    marginals, _ = text_logps(trainer, trainer.model, *prompts, texts, [list(t) for t in rows], [True] * len(rows),
                           EXACT)
    written, _ = policy_byte_logps(trainer, *prompts, range(len(rows)), [list(t) for t in rows], [True] * len(rows),
                                   limits=EXACT)
    loss, _ = exact.exact_kl_term(trainer, trainer.model, batch(model, teacher, rows, taught), "bytekd", 1.0, EXACT)
    loss.backward()
    return {"judged": judged[:2], "marginals": marginals, "written": written, "loss": loss.detach(),
            "grad": trainer.theta.grad.clone(), "forwards": dict(trainer.forwards)}


def run_ranks(monkeypatch, why: str, untaught: tuple[int, ...] = ()) -> tuple[FakeGroup, dict[int, dict],
                                                                              dict[int, BaseException]]:
    """Both ranks' :func:`rank_work` in threads, each forward collective ``why``: ``zero3``, ``ddp`` (DDP's buffer
    broadcast), or ``unknown`` (the equaliser not told, off); the ranks in ``untaught`` have every row gated off;
    each rank's results and errors."""
    monkeypatch.setattr(rank_forwards, "zero3_enabled", lambda: why == "zero3")
    group, results, errors = FakeGroup(), {}, {}

    def rank(r: int) -> None:
        trainer = RankTrainer(LEARNER, LEARNER.theta.clone().requires_grad_(True), group, r, why == "ddp")
        try:
            results[r] = rank_work(trainer, LEARNER, TEACHER, TOKENS[r], r not in untaught)
            group.collective(r, "end of step")
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors[r] = error
            group.barrier.abort()  # the other rank stops waiting

    threads = [threading.Thread(target=rank, args=(r,)) for r in TOKENS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return group, results, errors


LEARNER = TableModel(PIECES, depth=3, seed=1)
TEACHER = ByteChainModel(TableModel(PIECES, depth=3, seed=5), ALPHABET)


def alone(rows: list[tuple[int, ...]]) -> dict:
    """One rank's results with no other rank (no collective at all)."""
    trainer = RankTrainer(LEARNER, LEARNER.theta.clone().requires_grad_(True), None, 0)
    return rank_work(trainer, LEARNER, TEACHER, rows)


@pytest.mark.parametrize("why", ["zero3", "ddp"])
def test_two_ranks_with_different_cover_counts_pair_every_forward_and_compute_the_same_values(monkeypatch, why):
    monkeypatch.setattr(cover_scoring, "LOGITS_PER_CALL", 1)  # one sequence a call: the ranks' gradient calls differ
    group, results, errors = run_ranks(monkeypatch, why)
    assert not errors, errors
    assert group.log[0] == group.log[1]  # every collective paired, forwards and backwards included
    assert results[0]["forwards"] == results[1]["forwards"]
    singles = {r: alone(rows) for r, rows in TOKENS.items()}
    assert singles[1]["forwards"]["grad"] < singles[0]["forwards"]["grad"]  # so rank 1 pads its gradient calls
    assert results[1]["forwards"]["grad"] == singles[0]["forwards"]["grad"]  # to the count of the rank with most
    assert singles[0]["forwards"] == results[0]["forwards"]  # the rank with the most runs no dummy
    assert singles[1]["forwards"]["no grad"] < results[1]["forwards"]["no grad"]  # the other runs dummies
    for r, rows in TOKENS.items():
        single = singles[r]
        for got, want in zip(results[r]["judged"], single["judged"], strict=True):
            assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        assert torch.equal(results[r]["marginals"], single["marginals"])
        assert all(torch.equal(results[r]["written"][i], single["written"][i]) for i in range(len(rows)))
        assert float(single["loss"]) > 0 and torch.equal(results[r]["loss"], single["loss"])
        assert torch.allclose(results[r]["grad"], single["grad"], atol=1e-7, rtol=0)


@pytest.mark.parametrize("why", ["zero3", "ddp"])
def test_a_rank_whose_every_row_is_gated_off_still_runs_the_step_with_the_others(monkeypatch, why):
    """No taught row on a rank (its gate closed everywhere): it forwards row 0 at weight 0, so its collectives pair
    with the taught rank's, and its loss and gradient are exact zeros."""
    monkeypatch.setattr(cover_scoring, "LOGITS_PER_CALL", 1)
    group, results, errors = run_ranks(monkeypatch, why, untaught=(0,))
    assert not errors, errors
    assert group.log[0] == group.log[1]
    assert float(results[0]["loss"]) == 0.0 and not results[0]["grad"].any()
    assert float(results[1]["loss"]) > 0


def test_without_the_equaliser_the_ranks_collectives_do_not_pair(monkeypatch):
    _, _, errors = run_ranks(monkeypatch, "unknown")
    assert any(isinstance(error, Mismatch) for error in errors.values()), errors


def test_ddp_read_from_will_sync_module_buffers_leaves_the_gradient_calls_unpadded(monkeypatch):
    """After the enumeration's forwards without a gradient DDP's ``will_sync_module_buffers()`` is False, so a check
    that reads it pads nothing, yet each gradient forward after the first broadcasts the buffers."""
    monkeypatch.setattr(cover_scoring, "LOGITS_PER_CALL", 1)  # one sequence a call: the ranks' gradient calls differ
    monkeypatch.setattr(rank_forwards, "broadcasts_buffers", lambda model: bool(model.will_sync_module_buffers()))
    _, _, errors = run_ranks(monkeypatch, "ddp")
    assert any(isinstance(error, Mismatch) for error in errors.values()), errors


def test_one_rank_or_forwards_that_are_not_collective_run_no_collective_and_no_dummy(monkeypatch):
    monkeypatch.setattr(rank_forwards, "zero3_enabled", lambda: True)
    single = RankAccelerator(None, 0)
    model = SimpleNamespace(will_sync_module_buffers=lambda: False, forward_sync_buffers=True,
                            modules_buffers=[torch.zeros(1)])  # DDP with buffers, whatever the last forward was
    assert not rank_forwards.forwards_are_collective(single, model)
    assert rank_forwards.missing_calls(single, model, 3) == 0
    monkeypatch.setattr(rank_forwards, "zero3_enabled", lambda: False)
    two = RankAccelerator(FakeGroup(), 0)  # a collective on it would wait for a rank that never comes
    quiet = SimpleNamespace(will_sync_module_buffers=lambda: False, forward_sync_buffers=True,
                            modules_buffers=[])  # DDP without buffers to broadcast
    assert not rank_forwards.forwards_are_collective(two, quiet) and rank_forwards.missing_calls(two, quiet, 3) == 0
    assert rank_forwards.forwards_are_collective(two, model)
    with rank_forwards.forwards_in_step(SimpleNamespace(accelerator=two), quiet) as in_step:
        forward = LEARNER.forward()
        assert in_step(forward) is forward


def test_the_lockstep_runs_a_dummy_per_round_another_rank_still_forwards():
    rounds = iter([True, True, False])  # the other ranks still forward twice, then every rank is done
    ranks = SimpleNamespace(device=torch.device("cpu"),
                            reduce=lambda flag, reduction: flag + int(next(rounds)))
    dummies = []
    lockstep = rank_forwards.LockstepForwards(ranks, lambda: dummies.append(1))
    lockstep.finish()
    assert len(dummies) == lockstep.dummies == 2 and lockstep.rounds == 0


@pytest.mark.parametrize("rank_rows", [1, 3])
def test_missing_calls_is_what_this_rank_lacks_of_the_rank_with_most(monkeypatch, rank_rows):
    monkeypatch.setattr(rank_forwards, "zero3_enabled", lambda: True)
    ranks = SimpleNamespace(num_processes=2, device=torch.device("cpu"),
                            gather=lambda count: torch.cat([count, torch.tensor([3])]))
    assert rank_forwards.missing_calls(ranks, None, rank_rows) == 3 - rank_rows


def test_the_logits_width_of_a_model_wrapped_by_deepspeeds_engine_is_its_modules():
    """DeepSpeed's engine (the model TRL's loss gets under DeepSpeed) has a ``config`` of its own, DeepSpeed's dict."""
    module = SimpleNamespace(config=SimpleNamespace(vocab_size=7))
    engine = SimpleNamespace(module=module, config={"zero_optimization": {"stage": 3}})
    assert cover_scoring.logits_width(engine) == cover_scoring.logits_width(module) == 7

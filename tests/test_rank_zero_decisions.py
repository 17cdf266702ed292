"""Decisions a policy's ranks must share are rank 0's (training/rank_zero.py): on a shared file system one rank
can see a file another does not yet, and ranks that decide differently enter different collectives and hang.

Two gloo ranks, each with its own view of the run folder (the NFS case: rank 1 sees a validation result from
before a resume that rank 0 does not), must take the same path."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from gloo_ranks import run_on_two_ranks
from mutualrl.errors import UsageError
from mutualrl.evaluation.results import ModelEvalResult, PromptResult
from mutualrl.run_folder import RunPaths
from mutualrl.tasks.base import TaskExample
from mutualrl.training.callbacks import ValidationCallback

EXAMPLES = [TaskExample(prompt_id=f"p{i}", prompt=f"{i}+1=", answer=str(i + 1), task="synthetic-arith")
            for i in range(4)]


class RankView(RunPaths):
    """The run folder as one rank sees it: validation results are looked up where only this rank's files are."""

    def __init__(self, root: Path, rank: int):
        super().__init__(root)
        self.rank = rank

    def eval_result(self, policy: str, step: int) -> Path:
        return self.root / f"rank{self.rank}" / f"{policy}-{step}.json"


def fake_evaluate(model, tokenizer, examples, *, progress, **kw):
    progress(len(examples))
    return ModelEvalResult(model="p", records=[PromptResult(prompt_id=ex.prompt_id, task=ex.task, prompt=ex.prompt,
                                                            completion="", answer="", extracted=None, score=1.0)
                                               for ex in examples])


def validate_on_rank(accelerator, root: Path) -> dict:
    """One rank's validation at step 3 with the transformers path faked; what it did."""
    import trl.models.utils

    import mutualrl.evaluation.generate as generate

    rank = accelerator.process_index
    evaluated: list[int] = []

    def evaluate(*args, **kwargs):
        evaluated.append(len(args[2]))
        return fake_evaluate(*args, **kwargs)

    generate.evaluate_examples = evaluate  # a forked rank: its own copy of the modules
    trl.models.utils.unwrap_model_for_generation = lambda model, *a, **k: contextlib.nullcontext(model)
    trainer = SimpleNamespace(use_vllm=False, model_wrapped=None, accelerator=accelerator,
                              args=SimpleNamespace(ds3_gather_for_generation=True),
                              callback_handler=SimpleNamespace(callbacks=[]))
    callback = ValidationCallback(RankView(root, rank), "p", "sgt", EXAMPLES, None, False, every_steps=1,
                                  max_new_tokens=4, batch_size=2, at_start=False)
    callback.trainer = trainer
    callback.validate(SimpleNamespace(global_step=3, is_world_process_zero=rank == 0))
    return {"evaluated": evaluated, "saved": callback.paths.eval_result("p", 3).exists()}


def test_ranks_validate_alike_when_only_one_sees_an_earlier_result(tmp_path):
    (tmp_path / "rank1").mkdir()
    (tmp_path / "metrics").mkdir()
    (tmp_path / "rank1" / "p-3.json").write_text("{}")  # rank 1's view: done before the resume; rank 0's: not
    rank0, rank1 = run_on_two_ranks(validate_on_rank, tmp_path, timeout_s=60)
    assert rank0["evaluated"] == rank1["evaluated"] == [2]  # rank 0 decided: both validated their 2 prompts
    assert rank0["saved"]


def finish_or_train_on_rank(accelerator, checkpoints: dict[int, str]) -> str:
    """Which path one rank takes when its view of the checkpoint is ``checkpoints[rank]``."""
    from mutualrl.training import worker

    worker.check_resumable = lambda checkpoint: None
    worker.checkpoint_state = lambda checkpoint: SimpleNamespace(global_step=int(checkpoints[accelerator.process_index]))
    taken: list[str] = []
    worker.finish_from_checkpoint = lambda *a: taken.append("finish")
    trainer = SimpleNamespace(accelerator=accelerator, args=SimpleNamespace(max_steps=4),
                              train=lambda resume_from_checkpoint: taken.append("train"))
    worker.train_or_finish(trainer, "checkpoint-4", validation=None)
    return taken[0]


def test_ranks_finish_or_train_as_rank_zero_read_the_checkpoint():
    # Rank 0 reads a checkpoint holding every step (finish only); rank 1 a stale copy of its state (train on).
    assert run_on_two_ranks(finish_or_train_on_rank, {0: "4", 1: "2"}) == ["finish", "finish"]


def refuse_on_rank(accelerator) -> str:
    from mutualrl.training.rank_zero import decided_on_rank_zero

    def decide():
        raise UsageError(f"rank {accelerator.process_index}: checkpoint-4 is damaged")

    try:
        decided_on_rank_zero(accelerator, decide if accelerator.is_main_process else lambda: "never asked")
    except UsageError as err:
        return str(err)
    return "no error"


def test_an_error_of_rank_zeros_decision_is_raised_on_every_rank():
    assert run_on_two_ranks(refuse_on_rank) == ["rank 0: checkpoint-4 is damaged"] * 2


def test_one_rank_decides_alone():
    from mutualrl.training.rank_zero import decided_on_rank_zero

    assert decided_on_rank_zero(SimpleNamespace(num_processes=1), lambda: 7) == 7
    with pytest.raises(UsageError):
        decided_on_rank_zero(SimpleNamespace(num_processes=1), lambda: (_ for _ in ()).throw(UsageError("x")))

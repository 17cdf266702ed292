"""A run stopped at a checkpoint and resumed with ``--max-steps`` equal to that checkpoint's step finishes cleanly
(issue 93, class 1): the worker's finish keeps the checkpoint's weights and steps but this run's ``max_steps``, so
the launcher reads a final trainer state that trained every step it had (not "step 3 of 30 without finishing")."""

from __future__ import annotations

from types import SimpleNamespace

from transformers import TrainerState

from mutualrl.launch.supervise.worker_output import file_marks, unfinished_exit
from mutualrl.run_folder import RunPaths
from mutualrl.training.worker import finish_from_checkpoint


def stopped_at_three_of_thirty(folder):
    """A checkpoint folder whose trainer state is step 3 of a 30-step run."""
    checkpoint = folder / "checkpoint-3"
    checkpoint.mkdir(parents=True)
    TrainerState(global_step=3, max_steps=30).save_to_json(str(checkpoint / "trainer_state.json"))
    return checkpoint


def test_a_resume_at_the_checkpoints_step_finishes_at_the_new_max_steps(tmp_path):
    paths = RunPaths(tmp_path / "run")
    checkpoint = stopped_at_three_of_thirty(paths.policy_dir("tiny-bpe"))
    marks = file_marks(paths, "tiny-bpe")  # what the launcher notes as the worker starts
    loaded, validated = [], []
    trainer = SimpleNamespace(args=SimpleNamespace(max_steps=3), _load_from_checkpoint=loaded.append,
                              is_world_process_zero=lambda: True)
    state = TrainerState.load_from_json(str(checkpoint / "trainer_state.json"))

    finish_from_checkpoint(trainer, str(checkpoint), state, SimpleNamespace(validate=validated.append))

    assert loaded == [str(checkpoint)] and validated == [trainer.state]
    assert (trainer.state.global_step, trainer.state.max_steps) == (3, 3)
    final = paths.final_model("tiny-bpe")
    final.mkdir(parents=True)
    trainer.state.save_to_json(str(final / "trainer_state.json"))  # as save_outputs writes it
    assert unfinished_exit(paths, "tiny-bpe", marks, max_steps=3) is None


def test_the_launcher_still_names_a_worker_that_stopped_short(tmp_path):
    """The check the fix satisfies can fail: a final state short of the run's steps is named."""
    paths = RunPaths(tmp_path / "run")
    marks = file_marks(paths, "tiny-bpe")
    final = paths.final_model("tiny-bpe")
    final.mkdir(parents=True)
    TrainerState(global_step=3, max_steps=30).save_to_json(str(final / "trainer_state.json"))
    reason = unfinished_exit(paths, "tiny-bpe", marks, max_steps=3)
    assert reason is not None and "without finishing" in reason

"""A full disk at the write sites beyond checkpoints, metrics and shards (issue 26, second part).

- the SEE heartbeat is best effort: one warning per file, its age kept by its mtime, training goes on;
- tracker files (TensorBoard's event files) are a record the user reads: a failed write is the
  one-line "no space left on <logging dir>" error, as for metrics;
- the consumption log and the CLI's own outputs (eval report, plots, distill data) name their file.
"""

from __future__ import annotations

import json
import logging
import os
import time

import pytest

from mutualrl.errors import StorageError


def test_a_heartbeat_on_a_full_disk_warns_once_and_keeps_its_age(tmp_path, disk_full, caplog):
    from mutualrl.see import liveness
    from mutualrl.see.exchange import ExperienceExchange
    from mutualrl.see.liveness import HEARTBEAT_WARNING, HeartbeatWatch, start_heartbeat_thread

    exchange = ExperienceExchange(tmp_path, run_id="r", policy="a", world_size=1, rank=0)
    exchange.heartbeat(step=1)
    beat = next((tmp_path / "_heartbeat").iterdir())
    os.utime(beat, (time.time() - 100, time.time() - 100))
    peers = HeartbeatWatch(tmp_path)
    peers.look()  # where the heartbeat stands before the disk is full
    disk_full("_heartbeat")
    with caplog.at_level(logging.WARNING, logger=liveness.__name__):
        exchange.heartbeat(step=2)  # no exception: training goes on
        exchange.heartbeat(step=3)
        thread = start_heartbeat_thread(exchange, interval_s=0.02)
        time.sleep(0.2)
    assert thread.is_alive()  # the thread survives a full disk
    # only this file's: another test's heartbeat thread may still beat into its deleted folder
    warnings = [r.getMessage() for r in caplog.records if f"{HEARTBEAT_WARNING} {beat} " in r.getMessage()]
    assert len(warnings) == 1 and "no space left on" in warnings[0], warnings
    assert "\n" not in warnings[0]
    peers.look()
    assert peers.silent_for("a") is not None  # its mtime moved on: peers see it beat
    assert json.loads(beat.read_text())["step"] == 1  # only the step it names is behind
    assert sorted(p.name for p in beat.parent.iterdir()) == [beat.name]  # no temporary left


def test_the_consumption_log_appends_whole_lines_or_names_its_file(tmp_path, disk_full):
    from mutualrl.see.consumption_log import append_row, log_path

    append_row(tmp_path, "a", {"step": 1})
    disk_full("_consumed")
    with pytest.raises(StorageError, match=f"^no space left on {log_path(tmp_path, 'a')} "):
        append_row(tmp_path, "a", {"step": 2})
    assert log_path(tmp_path, "a").read_text() == '{"step": 1}\n'


@pytest.fixture
def tensorboard(tmp_path, monkeypatch):
    """A TensorBoard tracker callback, guarded as a worker guards it, started; (callback, args, state, control)."""
    import threading

    from transformers import TrainerControl, TrainerState, TrainingArguments
    from transformers.integrations import TensorBoardCallback

    from mutualrl.write_failures import report_thread_write_failures
    from mutualrl.training.trackers import guard_tracker_writes

    monkeypatch.setattr(threading, "excepthook", threading.excepthook)  # put back after the test
    report_thread_write_failures()
    args = TrainingArguments(output_dir=str(tmp_path / "policy"), report_to=[], use_cpu=True)
    callback = TensorBoardCallback()
    assert guard_tracker_writes([callback, object()]) >= 3  # on_train_begin, on_log, on_train_end at least
    state, control = TrainerState(), TrainerControl()
    callback.on_train_begin(args, state, control)
    callback.on_log(args, state, control, logs={"loss": 1.0})
    yield callback, args, state, control
    _join_failed_writer_threads()  # its one-line report lands in this test's output, not a later test's


def _join_failed_writer_threads() -> None:
    """Wait for TensorBoard writer threads that died of an error: the main thread sees the error before the
    dying thread's excepthook prints its report."""
    import threading

    from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread

    for thread in threading.enumerate():
        if isinstance(thread, _AsyncWriterThread) and thread.exception is not None:
            thread.join(timeout=10)


def test_a_full_disk_under_tensorboards_writer_thread_is_one_line_naming_its_folder(tensorboard, monkeypatch, capsys):
    """The real failure path: the event writer's background thread hits ENOSPC, the next call raises it."""
    import errno

    from tensorboard.summary.writer import record_writer

    callback, args, state, control = tensorboard

    def full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(record_writer.RecordWriter, "write", full)
    with pytest.raises(StorageError) as info:
        callback.on_log(args, state, control, logs={"loss": 2.0})
    message = str(info.value)
    assert message.startswith(f"no space left on {callback.logging_dir} (") and "\n" not in message, message
    _join_failed_writer_threads()
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and "(a write failed;" in err, err  # the thread's one line


def test_the_disk_full_injection_reaches_tracker_writes(tensorboard, disk_full):
    callback, args, state, control = tensorboard
    disk_full("/runs/")  # TensorBoard's default logging dir: <output_dir>/runs/<time>_<host>
    with pytest.raises(StorageError, match=f"^no space left on {callback.logging_dir} "):
        callback.on_log(args, state, control, logs={"loss": 2.0})


def test_a_thread_dying_of_another_error_keeps_its_traceback(monkeypatch, capsys):
    import threading

    from mutualrl.write_failures import report_thread_write_failures

    monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)  # Python's own (not pytest's)
    report_thread_write_failures()
    for error in (ValueError("a bug"), OSError(28, "No space left on device")):
        thread = threading.Thread(target=lambda e=error: (_ for _ in ()).throw(e), name="writer")
        thread.start()
        thread.join()
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: a bug" in err
    assert "warning: writer: OSError: [Errno 28] No space left on device (a write failed" in err


def test_an_asset_built_on_a_full_disk_names_it_and_leaves_nothing_half_built(tmp_path, disk_full):
    import errno

    from mutualrl.assets.cache import building

    dest = tmp_path / "tokenizers" / "x"
    with pytest.raises(StorageError, match=f"^no space left on {dest} "):
        with building(dest) as tmp:
            (tmp / "tokenizer.json").write_text("{}")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what a builder's write() raises: no filename
    disk_full("tokenizers/x")
    with pytest.raises(StorageError, match=f"^no space left on {dest} "):
        with building(dest):
            pass
    assert not dest.exists() and list(dest.parent.iterdir()) == []


def test_a_figure_on_a_full_disk_names_its_file(tmp_path, disk_full):
    from mutualrl.evaluation.plot_style import pyplot, save_with_legend

    out = tmp_path / "curves.png"
    fig = pyplot().figure()
    disk_full("curves.png")
    with pytest.raises(StorageError, match=f"^no space left on {out} "):
        save_with_legend(fig, [("a", {"color": "k"})], out)
    assert not out.exists()

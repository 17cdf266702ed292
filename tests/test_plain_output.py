"""Output where no terminal is (issue 95): a file, CI or nohup gets lines whole and tables at their own width, one
line per step and policy; and evaluation does not say settings that change nothing greedy generates."""

from __future__ import annotations

import io
import sys

import pytest
from rich.table import Table

from mutualrl.host.terminal import PLAIN_WIDTH, command_console
from mutualrl.launch.supervise.runner import plain_phase


def test_a_console_on_a_pipe_never_wraps_a_line_and_draws_tables_at_their_width(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    console = command_console()
    assert console.width == PLAIN_WIDTH
    line = "tiny-bpe: step 12/60 " + "  ".join(f"figure{k} 0.{k}" for k in range(20))  # ~250 characters
    console.print(line, highlight=False)
    table = Table()
    for name in ("policy", "group", "steps", "before", "after", "change", "SGT rescues", "rescue log p"):
        table.add_column(name)
    table.add_row("tiny-bpe", "all", "60", "0.344", "0.281", "-0.062", "12", "-19.09 → -21.06")
    console.print(table)
    printed = sys.stdout.getvalue().splitlines()
    assert printed[0] == line  # whole, not cut at 80 columns
    assert any("rescue log p" in row for row in printed)  # the header on one line
    monkeypatch.setenv("COLUMNS", "100")
    assert command_console().width == 100  # COLUMNS still decides


def test_the_routine_phases_of_a_step_are_one_phase_for_the_plain_log():
    assert {plain_phase(p) for p in ("training", "waiting for peers", "waiting for peers' judgements",
                                     "validating 3/32 (step 8)")} == {"running"}
    assert [plain_phase(p) for p in (None, "saving", "stopping", "finished")] == ["starting", "saving", "stopping",
                                                                               "finished"]


def test_output_form_settings_are_not_said_as_ignored_by_greedy_decoding():
    from transformers import GenerationConfig

    from mutualrl.pools.greedy import ignored_generation_settings

    class Model:
        generation_config = GenerationConfig(output_attentions=True, output_hidden_states=True, use_cache=False,
                                             do_sample=True, temperature=0.7)

    assert ignored_generation_settings(Model()) == ["do_sample=True", "temperature=0.7"]

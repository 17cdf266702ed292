"""Third-party warnings and log lines stay out of the reports of doctor, distill and eval (issue 27);
mutualrl's own warnings and every library's errors stay."""

from __future__ import annotations

import logging
import sys
import warnings

import pytest

from mutualrl.host.quiet_libraries import THIRD_PARTY_LOGGERS, BelowError, quiet_third_party


@pytest.fixture()
def restored_loggers():
    saved = {name: (logging.getLogger(name).level, list(logging.getLogger(name).filters))
             for name in THIRD_PARTY_LOGGERS}
    yield
    for name, (level, filters) in saved.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.filters[:] = filters


def test_third_party_warnings_are_ignored_and_mutualrl_warnings_kept(monkeypatch, restored_loggers):
    monkeypatch.setattr(sys, "warnoptions", [])
    with warnings.catch_warnings(record=True) as caught:
        quiet_third_party()
        warnings.warn_explicit("deprecated internals", FutureWarning, "modeling_utils.py", 1,
                               module="transformers.modeling_utils", registry={})
        warnings.warn_explicit("fan_in_fan_out", UserWarning, "layer.py", 2, module="peft.tuners.lora.layer",
                               registry={})
        warnings.warn_explicit("rows have no fact", UserWarning, "qa.py", 3, module="mutualrl.tasks.qa",
                               registry={})
    assert [str(w.message) for w in caught] == ["rows have no fact"]


def test_warning_options_given_by_the_user_win(monkeypatch, restored_loggers):
    monkeypatch.setattr(sys, "warnoptions", ["default"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        quiet_third_party()
        warnings.warn_explicit("deprecated internals", FutureWarning, "modeling_utils.py", 1,
                               module="transformers.modeling_utils", registry={})
    assert [str(w.message) for w in caught] == ["deprecated internals"]


def test_deepspeed_log_lines_under_error_are_dropped_errors_kept(restored_loggers):
    quiet_third_party()
    logger = logging.getLogger("DeepSpeed")
    logger.setLevel(logging.INFO)  # what DeepSpeed's import does to its logger: the filter still holds
    warning = logger.makeRecord("DeepSpeed", logging.WARNING, "real_accelerator.py", 213, "Setting accelerator "
                                "to CPU", (), None)
    error = logger.makeRecord("DeepSpeed", logging.ERROR, "x.py", 1, "a real failure", (), None)
    assert not logger.filter(warning) and logger.filter(error)
    assert sum(isinstance(f, BelowError) for f in logger.filters) == 1
    quiet_third_party()  # twice: still one filter
    assert sum(isinstance(f, BelowError) for f in logger.filters) == 1


@pytest.mark.slow  # over 5 s on the 2-core box: the full suite, not the fast tier
def test_doctor_prints_no_library_noise(doctor_json):
    done = doctor_json
    assert done.returncode in (0, 1), done.stderr
    for noise in ("[WARNING]", "Setting accelerator", "FutureWarning", "UserWarning"):
        assert noise not in done.stdout + done.stderr, done.stderr
    assert done.stdout.lstrip().startswith("{")

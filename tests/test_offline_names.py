"""Offline look-ups fail in seconds: a hub id with no reachable hub is answered from the local cache or refused."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from mutualrl.assets import hub
from mutualrl.errors import UnknownNameError

# A hub endpoint nothing listens on: the probe is refused at once, as on a compute node without internet.
NO_HUB = {"HF_ENDPOINT": "https://127.0.0.1:9", "HF_HUB_OFFLINE": "0"}


@pytest.fixture
def unreachable_hub(monkeypatch):
    """Online mode (``HF_HUB_OFFLINE=0``) with a hub endpoint that refuses connections (not conftest's
    ``offline_hub``, which turns the hub off by its variables)."""
    for key, value in NO_HUB.items():
        monkeypatch.setenv(key, value)
    hub._can_connect.cache_clear()
    yield
    hub._can_connect.cache_clear()


def test_probe_honours_offline_variables_and_a_dead_endpoint(unreachable_hub, monkeypatch):
    assert hub.hub_reachable(timeout_s=1.0) is False
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.hub_reachable() is False


def test_hub_tokenizer_without_hub_fails_fast_naming_what_works(unreachable_hub):
    from transformers import AutoTokenizer  # noqa: F401  (import time is not look-up time)

    from mutualrl.assets.tokenizers import load_tokenizer

    started = time.perf_counter()
    with pytest.raises(UnknownNameError) as err:
        load_tokenizer("nosuch-owner/nosuch-model")
    assert time.perf_counter() - started < 10
    message = str(err.value)
    assert "'nosuch-owner/nosuch-model'" in message and "cannot be reached" in message and "qwen3" in message


def test_hub_model_without_hub_fails_fast(unreachable_hub):
    from transformers import AutoModelForCausalLM  # noqa: F401  (import time is not look-up time)

    from mutualrl.pools.loading import load_model

    started = time.perf_counter()
    with pytest.raises(UnknownNameError, match="cannot be reached"):
        load_model("nosuch-owner/nosuch-model")
    assert time.perf_counter() - started < 10


@pytest.mark.slow  # over 2 s: outside the fast tier
@pytest.mark.parametrize("source", ["nosuch", "nosuch-owner/nosuch-model"])
def test_thl_check_with_unknown_source_is_one_line(source):
    """The CLI's end of the look-ups above (their speed is timed there, in-process: a subprocess's start-up
    time on a loaded CI box says nothing about hub retries)."""
    done = subprocess.run([sys.executable, "-m", "mutualrl", "thl-check", "--source", source, "--target", "gpt2"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **NO_HUB})
    assert done.returncode != 0 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and source in errors[0], done.stderr

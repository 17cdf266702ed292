"""Holes an adversarial review of the trust boundary found: each a run folder (or a model folder it names) making
code run, or a command hang, that the checks before it let through."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutualrl.errors import UsageError
from security_helpers import resume, stored_run_maker


@pytest.fixture
def stored_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return stored_run_maker(tmp_path, monkeypatch)


@pytest.mark.parametrize("setting", [
    "grpo.model_init_kwargs={trust_remote_code: true}",
    "pool.policies.0.grpo.model_init_kwargs={trust_remote_code: true}",
    """grpo.model_init_kwargs='{"trust_remote_code": "true"}'""",  # TRL parses the JSON text and "true"
])
def test_a_stored_model_init_kwargs_trust_remote_code_is_refused_on_resume(stored_run, setting: str) -> None:
    """TRL builds the reference model (``beta`` > 0) with ``model_init_kwargs``: its ``trust_remote_code`` ran the
    ``auto_map`` code of the model folder the stored config names, on ``train --resume``, unasked."""
    paths = stored_run(setting, "grpo.beta=0.04")
    with pytest.raises(UsageError, match=r"config\.yaml: grpo\.trust_remote_code is on for tiny-bpe"):
        resume(paths)
    assert resume(paths, "grpo.trust_remote_code=true")  # the command running now may switch it on


def test_model_init_kwargs_without_trust_resume_as_before(stored_run) -> None:
    paths = stored_run("grpo.model_init_kwargs={trust_remote_code: false}", "grpo.beta=0.04")
    assert resume(paths).grpo["beta"] == 0.04


def test_a_huge_file_an_inputs_record_names_is_refused_unread_on_resume(stored_run) -> None:
    """``inputs.json`` may name any file as a module: ``--resume`` (and a sweep's reuse check) hashed a sparse
    terabyte one for days, printing nothing."""
    import json
    import os

    paths = stored_run()
    big = paths.root.parent / "big.py"
    with open(big, "wb") as handle:
        handle.truncate(1 << 40)  # sparse: no disk used
    record = {"format": 1, "code": {str(big): {"file": str(big), "sha256": "0" * 64}}, "data": {}}
    paths.inputs.write_text(json.dumps(record))
    with pytest.raises(UsageError, match=r"big\.py: 1,099,511,627,776 bytes, too large to be a Python module"):
        resume(paths)
    assert os.stat(big).st_blocks == 0  # nothing was read into it either


def test_a_sparse_data_copy_is_refused_before_it_is_hashed(tmp_path: Path) -> None:
    """A run folder's ``data/eval.jsonl`` truncated to 4 TiB (a hole, nothing on disk) kept ``eval RUN`` and
    ``--resume`` hashing zeros for days."""
    import os

    from mutualrl.errors import DataError
    from mutualrl.launch.rundir.inputs import refuse_sparse

    sparse = tmp_path / "eval.jsonl"
    with open(sparse, "wb") as handle:
        handle.truncate(4 * 1024 ** 4)
    if os.stat(sparse).st_blocks * 512 * 16 >= os.stat(sparse).st_size:
        pytest.fail("this filesystem does not make sparse files; the check cannot be exercised here")
    with pytest.raises(DataError, match="sparse file"):
        refuse_sparse(sparse)
    real = tmp_path / "train.jsonl"
    real.write_text('{"prompt": "1+1="}\n' * 10)
    refuse_sparse(real)  # a written file passes


def test_a_chat_template_raising_to_a_power_is_refused_before_it_renders() -> None:
    """``{{ 9 ** 9 ** 9 }}`` is one C-level operation the timer signal cannot stop; a trailing newline in a policy
    name no longer passes the path-name check."""
    from types import SimpleNamespace

    from mutualrl.config.validate import check_path_name
    from mutualrl.errors import DataError
    from mutualrl.pools.template_render import bounded_render

    tokenizer = SimpleNamespace(chat_template="{{ (3 ** 10000000) % 7 }}")
    with pytest.raises(DataError, match=r"raises a number to a power"):
        bounded_render(tokenizer, lambda: pytest.fail("rendered"), "tok")
    plain = SimpleNamespace(chat_template="{% for m in messages %}{{ m['content'] * 2 }}{% endfor %}")
    assert bounded_render(plain, lambda: "ok", "tok") == "ok"
    from mutualrl.config.typed import ConfigError

    with pytest.raises(ConfigError, match="pool.name"):
        check_path_name("name\n", "recipe.yaml", "pool.name")
    check_path_name("name", "recipe.yaml", "pool.name")

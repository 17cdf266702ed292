"""Resume: what may change, the restart step, and the roll-back of metric rows and SEE steps."""

from __future__ import annotations

import json
from pathlib import Path

from mutualrl.launch.rundir.metrics_merge import rollback_metrics
from mutualrl.launch.rundir.resume import changes_training, clear_training_outputs, common_checkpoint, config_changes
from mutualrl.run_folder import RunPaths
from mutualrl.ops.exchange_rollback import rollback_exchange


def _config(**changes):
    config = {"regime": {"name": "sgt", "sgt": {"lam": 1.0}}, "output_dir": "runs/x",
              "pool": {"name": "tiny", "policies": [{"name": "a", "model": "m1", "grpo": {}},
                                                    {"name": "b", "model": "m2", "grpo": {}}]},
              "grpo": {"max_steps": 10, "seed": 1, "learning_rate": 3e-4}, "validation": {"every_steps": 5}}
    for key, value in changes.items():
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return config


def _texts(changes) -> list[str]:
    return [str(change) for change in changes]


def test_identity_changes_are_refused_and_named_each():
    refused, allowed = config_changes(_config(), _config(**{"regime.name": "xgrpo", "grpo.seed": 2}))
    assert _texts(refused) == ["grpo.seed: 1 -> 2", "regime.name: 'sgt' -> 'xgrpo'"]
    assert allowed == []


def test_length_and_reporting_may_change():
    refused, allowed = config_changes(_config(), _config(**{"grpo.max_steps": 20, "validation.every_steps": 2,
                                                            "output_dir": "/abs/x"}))
    assert refused == []
    assert _texts(allowed) == ["grpo.max_steps: 10 -> 20", "output_dir: 'runs/x' -> '/abs/x'", "validation.every_steps: 5 -> 2"]


def test_only_a_respelled_output_dir_leaves_training_unchanged():
    _, respelled = config_changes(_config(), _config(output_dir="/abs/x"))
    _, longer = config_changes(_config(), _config(**{"output_dir": "/abs/x", "grpo.max_steps": 20}))
    assert not changes_training(respelled) and not changes_training([])
    assert changes_training(longer)


def test_a_changed_model_is_refused_by_policy_name_and_reordering_is_not_a_change():
    before = _config()
    after = _config()
    after["pool"]["policies"] = list(reversed(after["pool"]["policies"]))
    assert config_changes(before, after) == ([], [])
    after["pool"]["policies"][0]["model"] = "other"
    assert _texts(config_changes(before, after)[0]) == ["pool.policies.b.model: 'm2' -> 'other'"]
    after = _config()
    after["pool"]["policies"][0]["grpo"] = {"max_steps": 5, "beta": 0.1}
    refused, allowed = config_changes(before, after)
    assert _texts(refused) == ["pool.policies.a.grpo.beta: '<unset>' -> 0.1"]
    assert _texts(allowed) == ["pool.policies.a.grpo.max_steps: '<unset>' -> 5"]


def _checkpoint(paths: RunPaths, policy: str, step: int, complete: bool = True) -> None:
    """Every file a plain checkpoint needs (empty zips stand for the torch files); without ``complete`` the
    trainer state, which transformers writes last, is missing."""
    import zipfile

    folder = paths.policy_dir(policy) / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(len(b"{}").to_bytes(8, "little") + b"{}")
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        zipfile.ZipFile(folder / name, "w").close()
    if complete:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))


def test_restart_step_is_the_last_complete_checkpoint_every_policy_has(tmp_path):
    paths = RunPaths(tmp_path)
    assert common_checkpoint(paths, ["a", "b"]) is None
    for step in (2, 4):
        _checkpoint(paths, "a", step)
    _checkpoint(paths, "b", 2)
    _checkpoint(paths, "b", 4, complete=False)  # killed while saving
    assert common_checkpoint(paths, ["a", "b"]) == 2
    _checkpoint(paths, "a", 6)
    (paths.policy_dir("b") / "checkpoint-4" / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    assert common_checkpoint(paths, ["a", "b"]) == 4
    assert common_checkpoint(paths, ["a", "b"], max_steps=3) == 2  # never resume past max_steps
    assert common_checkpoint(paths, ["a", "b"], max_steps=1) is None


def _row(policy: str, step: int, kind: str = "train") -> str:
    return json.dumps({"kind": kind, "policy": policy, "step": step, "time": 1000.0 + step + (0.5 if policy == "b" else 0)})


def test_rollback_rebuilds_the_merged_file_from_every_policy_row_up_to_the_step(tmp_path):
    paths = RunPaths(tmp_path)
    (tmp_path / "metrics").mkdir()
    for policy in ("a", "b"):
        rows = [_row(policy, 0, "eval")] + [_row(policy, s) for s in range(1, 6)] + [_row(policy, 5, "eval")]
        paths.policy_metrics(policy).write_text("\n".join(rows) + '\n{"kind": "train", "pol')  # cut by a kill
        (tmp_path / "eval" / policy).mkdir(parents=True)
        for step in (0, 2, 5):  # step 2's result was saved, its row never written (a kill in between)
            paths.eval_result(policy, step).write_text("{}")
    # the launcher merged only a's first two rows before it was killed
    paths.metrics.write_text(_row("a", 1) + "\n" + _row("a", 2) + "\n")

    dropped = rollback_metrics(paths, ["a", "b"], step=3)

    assert dropped == 2 * (2 + 1 + 1)  # steps 4, 5, the step-5 eval row, the damaged line
    merged = [json.loads(line) for line in paths.metrics.read_text().splitlines()]
    assert [(r["policy"], r["step"]) for r in merged] == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2),
                                                          ("a", 3), ("b", 3)]
    for policy in ("a", "b"):
        kept = [json.loads(line)["step"] for line in paths.policy_metrics(policy).read_text().splitlines()]
        assert kept == [0, 1, 2, 3]
        marker = tmp_path / "metrics" / f".{policy}.merged"
        assert int(marker.read_text()) == paths.policy_metrics(policy).stat().st_size  # nothing merged twice
        # step 5's result is validated again; step 2's (unreadable "{}", its row gone) is moved aside, not deleted
        assert sorted(p.name for p in (tmp_path / "eval" / policy).iterdir()) == ["step-000000.json",
                                                                                 "step-000002.json.damaged"]


def test_rollback_exchange_removes_the_restart_step_and_later(tmp_path):
    for step in range(5):
        (tmp_path / f"step-{step:06d}" / "a").mkdir(parents=True)
    (tmp_path / "_failed").mkdir()
    assert rollback_exchange(tmp_path, 3) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"step-{s:06d}" for s in range(3)]
    assert rollback_exchange(tmp_path / "missing", 0) == 0


def test_a_run_without_checkpoint_forgets_its_steps_but_keeps_prompts_config_and_logs(tmp_path):
    paths = RunPaths(tmp_path)
    for name in ("config.yaml", "run.json", "metrics.jsonl", "summary.json", ".mutualrl-run"):
        (tmp_path / name).write_text("x")
    for folder in ("data", "logs", "policies/a", "metrics", "eval/a", "status", "see/step-000000"):
        (tmp_path / folder).mkdir(parents=True)
    clear_training_outputs(paths, tmp_path / "see")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".mutualrl-run", "config.yaml", "data", "logs", "run.json"]


def test_rows_of_any_kind_keep_their_step_order_when_times_tie(tmp_path: Path):
    paths = RunPaths(tmp_path)
    (tmp_path / "metrics").mkdir()
    rows = [json.dumps({"kind": "eval", "policy": "a", "step": 0, "time": 5.0}),
            json.dumps({"kind": "train", "policy": "a", "step": 1, "time": 5.0})]
    paths.policy_metrics("a").write_text("\n".join(rows) + "\n")
    assert rollback_metrics(paths, ["a"], step=1) == 0
    assert [json.loads(line)["step"] for line in paths.metrics.read_text().splitlines()] == [0, 1]


def _real_checkpoint(paths: RunPaths, policy: str, step: int) -> Path:
    import torch
    from safetensors.torch import save_file

    folder = paths.policy_dir(policy) / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    save_file({"w": torch.ones(64, 64)}, str(folder / "model.safetensors"))
    torch.save({"state": torch.zeros(32)}, folder / "optimizer.pt")
    torch.save({"last_epoch": step}, folder / "scheduler.pt")
    torch.save({"cpu": torch.get_rng_state()}, folder / "rng_state.pth")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return folder


def test_a_checkpoint_cut_short_is_named_and_the_previous_one_is_used(tmp_path):
    from mutualrl.launch.rundir.resume import checkpoint_problem

    paths = RunPaths(tmp_path)
    for policy in ("a", "b"):
        for step in (2, 4):
            _real_checkpoint(paths, policy, step)
    assert checkpoint_problem(paths.policy_dir("a") / "checkpoint-4") is None
    model = paths.policy_dir("b") / "checkpoint-4" / "model.safetensors"
    with model.open("r+b") as fh:  # a full disk stopped the write half-way
        fh.truncate(model.stat().st_size // 2)
    damaged: list[str] = []
    assert common_checkpoint(paths, ["a", "b"], damaged=damaged) == 2
    assert len(damaged) == 1 and str(model) in damaged[0] and "truncated" in damaged[0]

    optimizer = paths.policy_dir("a") / "checkpoint-2" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:100])
    assert "optimizer.pt: damaged" in checkpoint_problem(optimizer.parent)
    (paths.policy_dir("a") / "checkpoint-2" / "trainer_state.json").write_text('{"global_st')
    assert "trainer_state.json: unreadable" in checkpoint_problem(optimizer.parent)
    assert common_checkpoint(paths, ["a", "b"]) is None  # nothing intact: start again from step 0

"""Stand-in worker for tests/test_zero3_branches.py: two ZeRO-3-only branches of the real trainer, on a CPU rank.

Run under the environment a CPU DeepSpeed launch plan gives (``ACCELERATE_USE_DEEPSPEED``, ``DS_ACCELERATOR=cpu``,
ZeRO-3 with ``zero.Init``) as ``python tests/_zero3_branches.py --run-dir RUN --policy NAME``. It writes
``RUN/zero3-branches.json``:

- ``skip``: :class:`CatchUpTrainer` skips every round (``see.catch_up``): the learning rate of each step, and
  whether any weight moved (none may; the schedule must advance as without DeepSpeed). With ``--skip-only``
  only this, into ``RUN/zero3-skip.json`` (run with a DeepSpeed file that has its own ``scheduler``);
- ``finish``: trains 2 steps with a checkpoint, then a fresh trainer (weights partitioned to shape [0] by
  ``zero.Init``) finishes from that checkpoint (``worker.finish_from_checkpoint``, what ``--resume`` of a run
  stopped after its last checkpoint does): whether its weights then equal the checkpoint's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace


def gathered(model):
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(model.parameters())):
        return {k: v.detach().clone().float() for k, v in model.state_dict().items()}


def build(run_dir: Path, policy: str, out: str, trainer_cls, steps: int, save: bool):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from mutualrl.config.loader import load_run_config
    from mutualrl.launch.plan.launch_plan import LaunchPlan
    from mutualrl.regimes.core.adapter import RegimeAdapter

    plan = LaunchPlan.read(run_dir).policy(policy)
    grpo = {**plan.grpo, "max_steps": steps, "learning_rate": 1e-2, "lr_scheduler_type": "linear", "warmup_steps": 0,
            "save_strategy": "steps" if save else "no", "save_steps": steps, "logging_steps": 1, "report_to": []}
    args = GRPOConfig(**{**grpo, "output_dir": str(run_dir / out)})  # before the model: zero.Init partitions it
    model = AutoModelForCausalLM.from_pretrained(plan.model)
    config = load_run_config("tiny", regime="standalone", check_grpo=False).config
    rows = [{"prompt": f"{a} plus {b} is", "prompt_id": f"p{a}-{b}"} for a in range(8) for b in range(8)]
    return trainer_cls(model=model, reward_funcs=lambda completions, **kw: [float(len(c)) for c in completions],
                       args=args, train_dataset=Dataset.from_list(rows),
                       processing_class=AutoTokenizer.from_pretrained(plan.model), policy_name=policy,
                       regime=RegimeAdapter(config, "tiny-bpe", exchange=None))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--policy", required=True)
    parser.add_argument("--skip-only", action="store_true", help="only the skipped rounds (result: zero3-skip.json)")
    ns = parser.parse_args()

    from transformers import TrainerState

    from mutualrl.training.catch_up import CatchUpTrainer
    from mutualrl.training.trainer import MutualGRPOTrainer
    from mutualrl.training.worker import finish_from_checkpoint

    class SkipEveryRound(CatchUpTrainer):
        def skip_round(self, step):
            return True

    result: dict = {}
    skipping = build(ns.run_dir, ns.policy, "skip", SkipEveryRound, steps=3, save=False)
    before = {k: v.clone() for k, v in gathered(skipping.model).items()}
    skipping.train()
    after = gathered(skipping.model)
    result["skip"] = {"zero_stage": skipping.accelerator.state.deepspeed_plugin.zero_stage,
                      "learning_rates": [row["learning_rate"] for row in skipping.state.log_history
                                         if "learning_rate" in row],
                      "moved": [k for k in before if not bool((before[k] == after[k]).all())]}
    if ns.skip_only:
        (ns.run_dir / "zero3-skip.json").write_text(json.dumps(result))
        return 0

    trained = build(ns.run_dir, ns.policy, "finish", MutualGRPOTrainer, steps=2, save=True)
    trained.train()
    checkpoint = ns.run_dir / "finish" / "checkpoint-2"
    final = gathered(trained.model)
    fresh = build(ns.run_dir, ns.policy, "finish-again", MutualGRPOTrainer, steps=2, save=False)
    shapes = sorted({tuple(p.shape) for p in fresh.model.parameters()})
    validated = []
    state = TrainerState.load_from_json(str(checkpoint / "trainer_state.json"))
    finish_from_checkpoint(fresh, str(checkpoint), state, SimpleNamespace(validate=validated.append))
    loaded = gathered(fresh.model)
    result["finish"] = {"partitioned_shapes": [list(s) for s in shapes], "validated_steps": [s.global_step for s in
                                                                                           validated],
                        "max_abs_diff": max(float((final[k] - loaded[k]).abs().max()) for k in final)}
    (ns.run_dir / "zero3-branches.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

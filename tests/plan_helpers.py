"""Plan a pool the way `mutualrl train --dry-run` does (the real CLI path), with test-friendly arguments."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mutualrl.launch.run import TrainOptions, plan_without_launch, resolve_config, run_dir_for


def dry_run(pool: str, overrides: Sequence[str] = (), gpus: int | None = None, device_map_text: str | None = None, *,
            regime: str | None = None, run_dir: Path | None = None, gpu_memory_gib: float | None = None,
            write: bool = False) -> Any:
    """``mutualrl train --pool POOL --set ... --gpus N --device-map ... -o RUN_DIR --dry-run`` (plan returned).

    Like the CLI's dry run it writes nothing; ``write=True`` then writes the files a real launch writes under
    ``run_dir`` (``RUN/launch/plan.json``, each policy's accelerate/DeepSpeed configs and planned GRPOConfig),
    for the tests that read them.
    """
    options = TrainOptions(pool=pool, regime=regime, overrides=list(overrides), gpus=gpus, device_map=device_map_text,
                           output_dir=run_dir, dry_run=True)
    config, _ = resolve_config(options)  # what `mutualrl train --dry-run` does (launch/run.py `_train_one`)
    plan = plan_without_launch(config, run_dir_for(config), gpu_memory_gib)
    if write:
        if run_dir is None:  # the plan's default run folder is under the working directory: never a test's
            raise ValueError("dry_run(write=True) needs run_dir")
        plan.write()
    return plan

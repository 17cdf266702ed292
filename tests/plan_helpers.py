"""Plan a pool the way `mutualrl train --dry-run` does (the real CLI path), with test-friendly arguments."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mutualrl.launch.run import TrainOptions, plan_without_launch, resolve_config, run_dir_for


def dry_run(pool: str, overrides: Sequence[str] = (), gpus: int | None = None, device_map_text: str | None = None, *,
            regime: str | None = None, run_dir: Path | None = None, gpu_memory_gib: float | None = None,
            write: bool = True) -> Any:
    """``mutualrl train --pool POOL --set ... --gpus N --device-map ... -o RUN_DIR --dry-run`` (plan returned).

    The plan is always written under ``run_dir`` (as the CLI does); ``write`` is accepted for old call sites.
    """
    options = TrainOptions(pool=pool, regime=regime, overrides=list(overrides), gpus=gpus, device_map=device_map_text,
                           output_dir=run_dir, dry_run=True)
    config, _ = resolve_config(options)  # what `mutualrl train --dry-run` does (launch/run.py `_train_one`)
    plan = plan_without_launch(config, run_dir_for(config), gpu_memory_gib)
    plan.write()  # the files a real launch writes, for the tests that read them (a dry run writes nothing)
    return plan

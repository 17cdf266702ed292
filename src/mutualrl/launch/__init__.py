"""MWRA placement and launch planning (paper Sec. "Multi-Worker Resource Allocation").

- :mod:`~mutualrl.launch.mwra`: which devices each policy gets; memory sanity check.
- :mod:`~mutualrl.launch.batching`: paper batch in prompts -> TRL GRPOConfig batch fields.
- :mod:`~mutualrl.launch.configs`: per-policy accelerate / DeepSpeed config files.
- :mod:`~mutualrl.launch.commands`: per-policy launch commands, environments, device adaptations.
- :mod:`~mutualrl.launch.plan`: the launch plan (``RUN/launch/plan.json``) and the dry run.

See docs/launch.md.
"""

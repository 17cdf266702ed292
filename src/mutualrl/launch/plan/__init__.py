"""Planning a launch, without side effects: what ``mutualrl train --dry-run`` shows (paper Sec. "Multi-Worker
Resource Allocation").

- :mod:`.mwra` / :mod:`.machines`: which devices each policy gets, on one machine or several; memory checks.
- :mod:`.batching` / :mod:`.cadence`: the paper's batch and schedule -> TRL GRPOConfig fields.
- :mod:`.commands` / :mod:`.configs`: per-policy launch commands, environments, accelerate / DeepSpeed configs.
- :mod:`.launch_plan` / :mod:`.checks` / :mod:`.render`: the plan (``RUN/launch/plan.json``), its checks, its text.
"""

"""``mutualrl train``: plan, start and watch a pool, in three subpackages (docs/architecture.md, docs/launch.md).

- :mod:`~mutualrl.launch.run`: the command flow of machine 0, top to bottom (resolve, prepare, plan, run,
  summarise); :mod:`~mutualrl.launch.secondary_machine`: the flow of the other machines of a run.
- :mod:`~mutualrl.launch.plan.launch_plan`: pure planning, everything ``--dry-run`` shows (MWRA placement, batching and
  cadence, commands, configs, checks, rendering). Imports neither of the other two.
- :mod:`~mutualrl.launch.supervise`: start, watch, restart and stop the policy processes; the pool loop every
  machine runs, and the machines' sessions.
- :mod:`~mutualrl.launch.rundir`: what the launcher does to the run folder (lock, preparing, record, resume
  and roll-back, checkpoints, metrics merge, summary). Imports neither of the other two.

Beside ``train``: :mod:`~mutualrl.launch.sweep` (``mutualrl sweep``: a grid of train runs, here or on Slurm) and
:mod:`~mutualrl.launch.evaluate` (what ``mutualrl eval`` and ``mutualrl.evaluate`` run).
"""

"""The test suite's fork server: CPU policy workers forked from a *zygote* that imported torch, transformers and TRL
once (:mod:`.start`: the launcher's side, :mod:`.server`: the zygote, :mod:`.child`: the forked worker).

Test code only. It reaches a launcher the suite starts through ``tests/fork_server/sitecustomize.py`` (this folder
is on the ``PYTHONPATH`` of every process the suite starts), which replaces the product's one seam,
``mutualrl.launch.supervise.worker_process.start_worker_process``, where ``MUTUALRL_FORK_SERVER`` names the
session's private folder. Tests that are about starting, stopping, restarting or supervising workers are marked
``user_start`` and run with it unset: their workers start as a user's do (``subprocess.Popen``).
"""

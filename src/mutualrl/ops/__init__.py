"""Operations: what keeps a run's files and processes in order, apart from the packages that implement the paper.

- :mod:`.exchange_inspect` (with :mod:`.exchange_inspect_report`) — ``mutualrl see inspect``: an exchange folder's
  shards, rounds and heartbeats read back and checked, for a person; :mod:`.peer_offpolicy_stats`, how off-policy
  each policy's peer samples were (the per-source figures of the run's metrics), beside it.
- :mod:`.exchange_rollback` — a resume's exchange cut back to the checkpoint's step.
- :mod:`.mounts` — the filesystem an exchange folder is on, and the mount options that would stall its barrier.
- :mod:`.watchdog` — a worker stops when its launcher dies.
- :mod:`.checkpoint_files` — is a checkpoint complete: its manifest, the files its kind needs, files cut short.

The exchange's own heartbeats (``see/liveness.py``) stay in the SEE: its barrier reads them every step.
"""

"""The SEE outside lock-step (beyond the paper; optional): bounded staleness, peer failure, catch-up, rejoin, replay.

The paper's pools run in lock-step (:mod:`mutualrl.see.lockstep`): at every exchange round each
policy waits for every peer's records of that round. This package widens that contract, and is
imported only when a run's ``see`` settings leave lock-step (docs/see.md, "Bounded staleness and
peer failure"):

- ``see.max_staleness = S``: read the newest peer round at most S rounds old (:mod:`.staleness`);
- ``see.on_peer_failure = continue`` (and ``see.max_restarts``): drop a failed peer, readmit it
  when it is restarted and back within the bound (:func:`.consumption.rejoin_pool`);
- ``see.catch_up``: a slow policy skips rounds so that faster peers need not wait;
- ``see.replay_consumption``: read the same rounds as a recorded run.

:class:`.consumption.BoundedConsumption` subclasses the lock-step
:class:`~mutualrl.see.lockstep.LockStepConsumption`; :mod:`mutualrl.see.rounds` chooses it and reads its round
for a regime in one call, and the trainer's side (skipped rounds) is :mod:`mutualrl.training.catch_up`.
"""

"""``mutualrl sweep``: a grid of ``mutualrl train`` runs, one run folder each under one sweep folder.

- :mod:`.grid`: the grid's runs, each run's state (reused, resumed, new) and the record, and training them on this
  machine;
- :mod:`.slurm`: the same runs as one Slurm job array (``--slurm``), with what each array task needs
  (:mod:`.task_needs`: GPUs, memory, the asset cache);
- :mod:`.live`: which runs are training now or waiting in the queue, never started a second time.
"""

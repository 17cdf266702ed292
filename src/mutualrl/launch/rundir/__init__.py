"""What the launcher does to the run folder (its paths: :mod:`mutualrl.run_folder`): lock it (:mod:`.lock`),
prepare it (:mod:`.prepare`), record the run (:mod:`.record`), resume and roll back (:mod:`.resume`), merge the
metrics (:mod:`.metrics_merge`), summarise (:mod:`.summary`)."""

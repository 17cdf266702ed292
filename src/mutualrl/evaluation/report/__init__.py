"""``mutualrl report``: the final held-out reward@1 of finished runs, grouped and compared, in every format.

- :mod:`.build`: the runs read, grouped and compared with their baselines (:class:`~.build.Report`, its rows);
- :mod:`.stats`: the seed-level statistics (a claim about these prompts; the task's is
  :mod:`mutualrl.evaluation.crossed`'s), :mod:`.caveats`: what a run's own record says a reader must be told;
- :mod:`.notes`: the lines under every table; :mod:`.formats`: markdown, CSV, LaTeX and JSON;
  :mod:`.terminal_table`: the terminal's table at any width.
"""

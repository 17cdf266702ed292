"""This release of mutualrl: its version, in the one place every layer may read it (layer 0, imports nothing).

``pyproject.toml`` reads it from here (``[tool.hatch.version]``); ``mutualrl.__version__``, ``mutualrl --version``, a
run's ``run.json`` and its lock marker carry it.
"""

VERSION = "0.10.0.dev0"

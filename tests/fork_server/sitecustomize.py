"""Run by every Python process the test suite starts (``tests/conftest.py`` puts this folder on their
``PYTHONPATH``, after the caller's own entries, so a ``sitecustomize`` of the caller's wins). Where
``MUTUALRL_FORK_SERVER`` names a folder: an import hook that, once a process imports
``mutualrl.launch.supervise.worker_process`` (a launcher does), puts the suite's fork server in the place of its
``start_worker_process`` (:func:`zygotes.start.plug_into`). Elsewhere, and in every process without the variable,
it does nothing; it imports nothing until that module is imported.

The product knows nothing of this: it starts its workers with ``subprocess.Popen`` and reads no variable, file or
socket that would change that. Whoever can put a ``sitecustomize`` on a process's ``PYTHONPATH`` runs code in it
anyway, so this opens nothing new.
"""

import os
import sys

SEAM = "mutualrl.launch.supervise.worker_process"


class _Plug:
    """A meta path finder for :data:`SEAM` alone: it finds the module as Python would, and plugs the fork server
    into it once the module ran."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != SEAM:
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path, target)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            from zygotes.start import plug_into

            plug_into(module)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("MUTUALRL_FORK_SERVER"):
    sys.meta_path.insert(0, _Plug())

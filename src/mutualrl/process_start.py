"""Moved to :mod:`mutualrl.host.process_start`; this name stays only while ``tests/conftest.py`` imports
:func:`imports_done` from it (delete the file once that import names ``mutualrl.host.process_start``)."""

from mutualrl.host.process_start import imports_done

__all__ = ["imports_done"]

"""Errors that mutualrl reports to users as a clear one-paragraph message.

Every error a user can cause (unknown model or tokenizer, malformed data row, dead peer,
corrupt exchange file, placement that cannot fit) derives from :class:`MutualRLError`, but
a bad recipe's, :class:`mutualrl.config.typed.ConfigError` (a ``ValueError``); the CLI prints
either's message without a traceback and exits non-zero. Anything else is a bug and keeps its traceback.
A failed write becomes a :class:`StorageError` in :mod:`mutualrl.write_failures`.
"""

from __future__ import annotations


class MutualRLError(Exception):
    """Base class of user-facing errors."""

    exit_code = 1


class UsageError(MutualRLError):
    """Bad input from the command line or a file (exit code 2)."""

    exit_code = 2


class UnknownNameError(UsageError):
    """A model, tokenizer, pool, task or regime name that mutualrl does not know."""


class DataError(UsageError):
    """Malformed input data (a dataset row, a results, eval or metrics file); the message names the file, and the
    row and field where one is at fault."""


class PlacementError(UsageError):
    """MWRA cannot place the pool on the devices (raised before anything starts)."""


class AssetError(MutualRLError):
    """An offline asset (tokenizer, model, data) could not be fetched or is damaged."""


class PeerError(MutualRLError):
    """A peer policy failed, stalled or published unreadable records."""


class RunFolderError(UsageError):
    """A file of a run folder that is damaged: not JSON, the wrong JSON type, a special file (a FIFO), cut short;
    the message names the file."""


class StorageError(MutualRLError):
    """A write failed for lack of space or an I/O error; the message names the path and the free space.

    Made by :mod:`mutualrl.write_failures`; a worker that stops on one exits with its ``DISK_FULL_EXIT``, so the
    launcher can say so even when the disk is too full for the worker's log to hold its last line.
    """

"""Errors that mutualrl reports to users as a clear one-paragraph message.

Every error a user can cause (bad recipe, unknown model or tokenizer, malformed data
row, dead peer, corrupt exchange file, placement that cannot fit) derives from
:class:`MutualRLError`; the CLI prints its message without a traceback and exits
non-zero. Anything else is a bug and keeps its traceback.
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
    """A malformed dataset row or file; the message names the row index and field."""


class PlacementError(UsageError):
    """MWRA cannot place the pool on the devices (raised before anything starts)."""


class AssetError(MutualRLError):
    """An offline asset (tokenizer, model, data) could not be fetched or is damaged."""


class PeerError(MutualRLError):
    """A peer policy failed, stalled or published unreadable records."""

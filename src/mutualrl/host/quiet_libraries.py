"""Keep third-party warnings and log lines out of the commands that print a report (doctor, distill, eval).

DeepSpeed logs "Setting accelerator to CPU" on import, transformers and PEFT raise ``FutureWarning`` /
``UserWarning`` about their own internals: none of it is about the user's run, and it buried the report.
mutualrl's own warnings stay, and so do errors from every library. ``-W`` / ``PYTHONWARNINGS`` win: a user
who asks for warnings gets them all.
"""

from __future__ import annotations

import logging
import sys
import warnings

#: Top-level loggers of the libraries these commands import (child loggers inherit the level).
THIRD_PARTY_LOGGERS = ("DeepSpeed", "transformers", "accelerate", "peft", "trl", "datasets", "torch", "vllm")


class BelowError(logging.Filter):
    """Drops records under ERROR. DeepSpeed resets its logger's level when it is imported; a filter stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


def quiet_third_party() -> None:
    """Ignore warnings raised in third-party modules and their loggers' records under ERROR."""
    if not sys.warnoptions:  # mutualrl's own warnings fall through to Python's default filters
        warnings.filterwarnings("ignore", module=r"(?!mutualrl(\.|$))")
    for name in THIRD_PARTY_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.ERROR)
        if not any(isinstance(f, BelowError) for f in logger.filters):
            logger.addFilter(BelowError())

"""One logging call for library code that may run without MMEngine."""
from __future__ import annotations

import logging
import sys


def log(message: str, level: int = logging.INFO) -> None:
    """Log ``message`` to MMEngine's current logger (a run's log file) where
    the process uses MMEngine, else to the standard library's ``vattn_mm``
    logger; MMEngine is never imported for it."""
    mmengine_logging = sys.modules.get('mmengine.logging')
    if mmengine_logging is not None:
        mmengine_logging.print_log(message, logger='current', level=level)
    else:
        logging.getLogger('vattn_mm').log(level, message)

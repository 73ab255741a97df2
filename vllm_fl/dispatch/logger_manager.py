"""The dispatch logger (``vllm_fl.dispatch``) and where its records go."""

from __future__ import annotations

import logging

__all__ = ["LOGGER_NAME", "get_logger", "configure_logging"]

LOGGER_NAME = "vllm_fl.dispatch"

_logger = logging.getLogger(LOGGER_NAME)
_handler: logging.Handler | None = None


def get_logger() -> logging.Logger:
    return _logger


def configure_logging(level: int) -> None:
    """Set the dispatch logger's level; print to stderr when nothing else handles its records."""
    global _handler
    _logger.setLevel(level)
    if _handler is None and not logging.getLogger().handlers:
        _handler = logging.StreamHandler()
        _handler.setFormatter(logging.Formatter("[%(levelname)s] %(name)s: %(message)s"))
        _logger.addHandler(_handler)

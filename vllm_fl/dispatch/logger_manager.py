"""The dispatch logger (``vllm_fl.dispatch``) and its level (``VLLM_FL_LOG_LEVEL``)."""

from __future__ import annotations

import logging

__all__ = ["LOGGER_NAME", "LOG_LEVELS", "get_logger", "parse_log_level", "configure_logging"]

LOGGER_NAME = "vllm_fl.dispatch"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

_logger = logging.getLogger(LOGGER_NAME)
_handler: logging.Handler | None = None


def get_logger() -> logging.Logger:
    return _logger


def parse_log_level(value: str, source: str) -> int:
    from .types import ConfigError

    name = value.strip().upper()
    if name == "WARN":
        name = "WARNING"
    if name not in LOG_LEVELS:
        raise ConfigError(
            f"{source}={value!r}: invalid log level; allowed: {', '.join(LOG_LEVELS)}"
        )
    return getattr(logging, name)


def configure_logging(level: int) -> None:
    """Set the dispatch logger's level; print to stderr when nothing else handles its records."""
    global _handler
    _logger.setLevel(level)
    if _handler is None and not logging.getLogger().handlers:
        _handler = logging.StreamHandler()
        _handler.setFormatter(logging.Formatter("[%(levelname)s] %(name)s: %(message)s"))
        _logger.addHandler(_handler)

"""The plugin's loggers (``vllm_fl.dispatch``, ``vllm_fl.vllm``) and where their records go."""

from __future__ import annotations

import logging

__all__ = ["LOGGER_NAME", "get_logger", "configure_logger", "configure_logging"]

LOGGER_NAME = "vllm_fl.dispatch"
#: the process name tells vLLM's processes apart (MainProcess, EngineCore, workers)
FORMAT = "[%(levelname)s] %(name)s (%(processName)s): %(message)s"

_logger = logging.getLogger(LOGGER_NAME)


def get_logger() -> logging.Logger:
    return _logger


def configure_logger(logger: logging.Logger, level: int) -> None:
    """Set ``logger``'s level and, when nothing else handles its records (vLLM configures only
    its own ``vllm`` logger), give it one stderr handler."""
    logger.setLevel(level)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)


def configure_logging(level: int) -> None:
    """Set the dispatch logger's level; print to stderr when nothing else handles its records."""
    configure_logger(_logger, level)

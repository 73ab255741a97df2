"""The plugin's loggers (``vllm_fl.dispatch``, ``vllm_fl.vllm``) and where their records go: each
record printed once."""

from __future__ import annotations

import logging

__all__ = ["LOGGER_NAME", "get_logger", "configure_logger", "configure_logging"]

LOGGER_NAME = "vllm_fl.dispatch"
#: the process name tells vLLM's processes apart (MainProcess, EngineCore, workers)
FORMAT = "[%(levelname)s] %(name)s (%(processName)s): %(message)s"

_logger = logging.getLogger(LOGGER_NAME)


def get_logger() -> logging.Logger:
    return _logger


def _root_prints() -> bool:
    return bool(logging.getLogger().handlers)


class _OwnHandler(logging.StreamHandler):
    """The stderr handler a logger gets where nothing else prints its records. It stays quiet
    while the root logger has handlers of its own (someone configured logging after us, e.g.
    ``logging.basicConfig``): the record propagates there, and is printed once."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(FORMAT))
        self.addFilter(lambda record: not _root_prints())


def configure_logger(logger: logging.Logger, level: int) -> None:
    """Set ``logger``'s level and, when nothing else handles its records (vLLM configures only
    its own ``vllm`` logger), give it one stderr handler."""
    logger.setLevel(level)
    if not logger.handlers and not _root_prints():
        logger.addHandler(_OwnHandler())


def configure_logging(level: int) -> None:
    """Set the dispatch logger's level; print to stderr when nothing else handles its records."""
    configure_logger(_logger, level)

"""The plugin's loggers get one stderr handler, with the process name, only where nothing else
handles their records."""

from __future__ import annotations

import logging

from vllm_fl.dispatch.logger_manager import configure_logger


def test_one_stderr_handler_naming_the_process(monkeypatch, capsys):
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    logger = logging.getLogger("vllm_fl.test_logger_manager.bare")
    monkeypatch.setattr(logger, "handlers", [])
    configure_logger(logger, logging.INFO)
    configure_logger(logger, logging.INFO)  # vLLM loads the plugin more than once per process
    assert len(logger.handlers) == 1
    logger.info("hello")
    logger.debug("not shown")
    err = capsys.readouterr().err
    assert err == "[INFO] vllm_fl.test_logger_manager.bare (MainProcess): hello\n"


def test_no_handler_where_the_root_logger_has_one(monkeypatch):
    monkeypatch.setattr(logging.getLogger(), "handlers", [logging.NullHandler()])
    logger = logging.getLogger("vllm_fl.test_logger_manager.rooted")
    monkeypatch.setattr(logger, "handlers", [])
    configure_logger(logger, logging.WARNING)
    assert logger.handlers == []
    assert logger.level == logging.WARNING


def test_each_record_printed_once_when_root_logging_is_configured_later():
    """vLLM's process: the plugin's handler first, then someone calls ``logging.basicConfig``."""
    import subprocess
    import sys

    code = (
        "import logging\n"
        "from vllm_fl.dispatch.logger_manager import configure_logging, get_logger\n"
        "configure_logging(logging.INFO)\n"
        "get_logger().info('before')\n"
        "logging.basicConfig()\n"
        "get_logger().info('after')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == [
        "[INFO] vllm_fl.dispatch (MainProcess): before",
        "INFO:vllm_fl.dispatch:after",
    ]

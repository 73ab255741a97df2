"""Bring-up mode in the process that runs the model.

The plugin's workers call ``start`` once vLLM has built the model and warmed it up (so vLLM's
dummy runs are neither verified nor counted as steps) and ``finish`` when the engine shuts down
(an ``atexit`` hook covers a process that ends without a shutdown). With ``VLLM_FL_VERIFY`` off
both return at once and nothing of the dispatch changes. ``start`` names the model's layers,
counts engine steps (model forwards), and installs the verifying callables as the ops'
selections; ``finish`` prints the report (worst first) and writes it to ``VLLM_FL_VERIFY_REPORT``.

Under torch.compile only eager calls are verified: the ops inside compiled graphs (and CUDA
graphs) run without the check, which ``start`` says in one log line; the MoE functions vLLM calls
from inside its own opaque custom op (``vllm.moe_forward``) run eagerly and are verified.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any

from vllm_fl.dispatch import get_config, get_logger, wrap_selections

from .report import format_report, merge, write

__all__ = ["start", "finish", "current", "enable", "disable"]

logger = get_logger()
_lock = threading.Lock()
_verifier = None
_finished = False


def current():
    """The process's ``Verifier`` while bring-up mode is on, else None."""
    return _verifier


def enable(
    model: Any = None,
    *,
    ops: Any = None,
    every: int | None = None,
    steps: int | None = None,
    compiled: bool = False,
):
    """Turn verification on in this process now (the settings unless given); ``model``: name its
    layers and count its forwards as steps (``compiled``: the model's forward is compiled, so
    its blocks get no hooks). Returns the ``Verifier``."""
    global _verifier, _finished
    from .verifier import Verifier

    cfg = get_config()
    verifier = Verifier(
        cfg.verify if ops is None else ops,
        cfg.verify_every if every is None else every,
        cfg.verify_steps if steps is None else steps,
    )
    if model is not None:
        verifier.sites.name_model(model, hooks=not compiled)

        def count_step(_module, _args):
            import torch

            if not torch.compiler.is_compiling():
                verifier.step += 1
                # the last step's numbers, read back while the device is idle between steps
                verifier.recorder.flush()

        verifier.sites._hooks.append(model.register_forward_pre_hook(count_step))
    with _lock:
        old, _verifier, _finished = _verifier, verifier, False
    if old is not None:
        old.sites.remove_hooks()
    wrap_selections(verifier.wrap)
    return verifier


def disable():
    """Turn verification off; returns the ``Verifier`` that was on (its report), or None."""
    global _verifier
    with _lock:
        verifier, _verifier = _verifier, None
    if verifier is not None:
        wrap_selections(None)
        verifier.sites.remove_hooks()
    return verifier


def start(model: Any, vllm_config: Any = None) -> bool:
    """The worker's step after warm-up: turn verification on if ``VLLM_FL_VERIFY`` says so."""
    cfg = get_config()
    if not cfg.verify:
        return False
    compiled = _compiled(vllm_config)
    verifier = enable(model, compiled=bool(compiled))
    atexit.register(finish)
    what = "every op" if cfg.verify is True else ", ".join(sorted(cfg.verify))
    if cfg.verify is not True:
        unknown = sorted(set(cfg.verify) - set(verifier.checks))
        if unknown:
            logger.warning(
                "vllm_fl verify: VLLM_FL_VERIFY names op(s) %s, which have no reference to "
                "check against; ops that can be verified: %s",
                ", ".join(unknown),
                ", ".join(sorted(verifier.checks)),
            )
    logger.info(
        "vllm_fl verify: bring-up mode on for %s (one call in %d, %s); the model keeps the "
        "selected impls' results",
        what,
        verifier.every,
        f"first {verifier.steps} step(s)" if verifier.steps else "every step",
    )
    if compiled:
        logger.warning(
            "vllm_fl verify: %s: only eager calls are verified; the ops inside compiled graphs "
            "and CUDA graphs are not (the MoE functions vLLM calls from its own custom op are). "
            "Run with enforce_eager=True to verify every call",
            compiled,
        )
    return True


def _compiled(vllm_config: Any) -> str:
    """What of torch.compile / CUDA graphs is on for this model ('' when eager)."""
    if vllm_config is None:
        return ""
    if getattr(vllm_config.model_config, "enforce_eager", False):
        return ""
    mode = getattr(vllm_config.compilation_config, "mode", None)
    level = getattr(mode, "name", str(mode))
    if mode is None or level in ("NONE", "0"):
        return ""
    return f"torch.compile is on (compilation mode {level})"


def finish() -> str | None:
    """Print this process's report and write it to ``VLLM_FL_VERIFY_REPORT``; once per
    ``start``. Returns the text printed (None when verification was off)."""
    global _finished
    with _lock:
        verifier = _verifier
        if verifier is None or _finished:
            return None
        _finished = True
    data = verifier.recorder.to_json(
        pid=os.getpid(),
        steps=verifier.step,
        every=verifier.every,
        verified=sorted(verifier.ops) if isinstance(verifier.ops, frozenset) else "all",
    )
    text = format_report(merge([data]))
    print(text, file=sys.stderr, flush=True)
    directory = get_config().verify_report
    if directory is not None:
        path = write(directory, data)
        logger.info("vllm_fl verify: report written to %s", path)
    return text

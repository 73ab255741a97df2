"""Lazy, cached, thread-safe availability checks for implementations (``OpImpl.available``)."""

from __future__ import annotations

import importlib
import threading

from . import sync

__all__ = ["Probe"]


def _device_present(device: str) -> bool:
    """Whether a device of torch device type ``device`` (cuda, npu, xpu, musa, mlu, ...) is
    there: ``torch.<device>.is_available()`` where the vendor's runtime registered that module
    (torch.npu, torch.musa exist once torch_npu, torch_musa are imported), else the current
    ``torch.accelerator`` being of that type with at least one device."""
    import torch

    if device == "cpu":
        return True
    if device == "cuda":
        return bool(torch.cuda.is_available())
    mod = getattr(torch, device, None)
    if mod is not None and callable(getattr(mod, "is_available", None)):
        return bool(mod.is_available())
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None or not accelerator.is_available():
        return False
    current = accelerator.current_accelerator()
    return current is not None and current.type == device and accelerator.device_count() > 0


class _Check:
    """Evaluated once, on first use; ``reason`` is None when available."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._reason: str | None = None
        sync.reinit_after_fork(self)

    def _reinit_after_fork(self) -> None:
        # The lock is held while a probe imports or probes a device, possibly by a thread the
        # forked child does not have: the child evaluates again if no result was recorded.
        self._lock = threading.Lock()

    def _evaluate(self) -> str | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _result(self) -> str | None:
        if not self._done:
            with self._lock:
                if not self._done:
                    try:
                        self._reason = self._evaluate()
                    except BaseException as exc:  # noqa: BLE001 - a probe never raises
                        self._reason = f"probe failed: {type(exc).__name__}: {exc}"
                    self._done = True
        return self._reason

    def __call__(self) -> bool:
        return self._result() is None

    @property
    def reason(self) -> str | None:
        return self._result()


class Probe(_Check):
    """Available when every module in ``requires`` imports and a ``device`` of that torch device
    type (cuda, npu, xpu, musa, mlu, cpu, ...) is present.

    The device is checked first, so a module that probes the device on import (flag_gems) is not
    imported on a machine without that device.
    """

    def __init__(self, requires: tuple[str, ...] = (), device: str | None = None) -> None:
        super().__init__()
        if isinstance(requires, str):
            requires = (requires,)
        self.requires = tuple(requires)
        if device is not None and not (isinstance(device, str) and device.isidentifier()):
            raise ValueError(f"Probe: invalid device {device!r}; expected a torch device type")
        self.device = device

    def _evaluate(self) -> str | None:
        if self.device is not None:
            try:
                present = _device_present(self.device)
            except Exception as exc:  # noqa: BLE001
                return f"no '{self.device}' device ({type(exc).__name__}: {exc})"
            if not present:
                return f"no '{self.device}' device"
        for name in self.requires:
            try:
                importlib.import_module(name)
            except BaseException as exc:  # noqa: BLE001 - e.g. SystemExit from a broken import
                return f"module '{name}' not importable: {type(exc).__name__}: {exc}"
        return None

    @staticmethod
    def all(*probes) -> "_AllOf":
        """Available when every probe (any zero-arg callable) is; reason of the first failing."""
        return _AllOf(probes)

    @staticmethod
    def of(evaluate, name: str) -> "_Evaluated":
        """Available when ``evaluate()`` (evaluated once, like every probe) returns None; what
        it returns otherwise, or what it raises, is the reason. ``name`` says what it checks."""
        return _Evaluated(evaluate, name)

    def __repr__(self) -> str:
        return f"Probe(requires={self.requires!r}, device={self.device!r})"


class _AllOf(_Check):
    def __init__(self, probes) -> None:
        super().__init__()
        for p in probes:
            if not callable(p):
                raise TypeError(f"Probe.all: {p!r} is not callable")
        self.probes = tuple(probes)

    def _evaluate(self) -> str | None:
        for p in self.probes:
            if not p():
                reason = getattr(p, "reason", None)
                return reason if isinstance(reason, str) and reason else f"{p!r} returned False"
        return None

    def __repr__(self) -> str:
        return f"Probe.all{self.probes!r}"


class _Evaluated(_Check):
    def __init__(self, evaluate, name: str) -> None:
        super().__init__()
        if not callable(evaluate):
            raise TypeError(f"Probe.of: {evaluate!r} is not callable")
        self.evaluate = evaluate
        self.name = name

    def _evaluate(self) -> str | None:
        return self.evaluate()

    def __repr__(self) -> str:
        return f"Probe.of({self.name})"

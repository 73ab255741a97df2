import threading

import pytest

from vllm_fl.dispatch.availability import Probe


def test_probe_available_and_missing_module():
    assert Probe(("json",))() is True
    assert Probe(("json",)).reason is None
    p = Probe(("no_such_module_xyz",))
    assert p() is False
    assert p.reason.startswith("module 'no_such_module_xyz' not importable: ModuleNotFoundError")


def test_probe_device():
    assert Probe(device="cpu")()
    import torch

    p = Probe(("flag_gems",), device="cuda")
    if not torch.cuda.is_available():
        assert not p() and p.reason == "no 'cuda' device"
    npu = Probe(device="npu")
    assert not npu() and npu.reason == "no 'npu' device"


def test_probe_never_raises_and_caches(monkeypatch):
    import importlib

    calls = []
    real = importlib.import_module

    def fake(name, *a, **k):
        if name == "boom_mod":
            calls.append(name)
            raise SystemExit("exit during import")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", fake)
    p = Probe(("boom_mod",))
    results = []
    threads = [threading.Thread(target=lambda: results.append(p())) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [False] * 16
    assert calls == ["boom_mod"]  # evaluated once
    assert "SystemExit" in p.reason


def test_probe_all():
    ok = Probe(("json",))
    bad = Probe(("no_such_module_xyz",))
    assert Probe.all(ok, ok)() and Probe.all(ok, ok).reason is None
    both = Probe.all(ok, bad, lambda: False)
    assert not both() and "no_such_module_xyz" in both.reason
    assert "returned False" in Probe.all(lambda: False).reason


def test_probe_of_evaluates_once_and_reports_the_reason():
    calls = []

    def missing():
        calls.append(1)
        return "library not found in /opt/x"

    probe = Probe.of(missing, "library")
    assert not probe() and not probe()
    assert probe.reason == "library not found in /opt/x"
    assert calls == [1]
    assert repr(probe) == "Probe.of(library)"
    assert Probe.of(lambda: None, "fine")() and Probe.of(lambda: None, "fine").reason is None
    with pytest.raises(TypeError, match="not callable"):
        Probe.of("nope", "bad")

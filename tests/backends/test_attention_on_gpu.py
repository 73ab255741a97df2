"""The flagos and cuda attention impls on a GPU, on the KV caches as vLLM hands them.

The generated parity tests give the impls contiguous caches; vLLM gives views of one KV-cache
tensor per layer: vLLM 0.24 (the GPU machine's) [num_blocks, 2, block_size, kv_heads,
head_size] unbound into keys and values, optionally with the HND stride order
(``VLLM_KV_CACHE_LAYOUT=HND``), and vLLM 0.32 [num_blocks, kv_heads, block_size,
2 * head_size] split in its last dimension. Every test case of ``paged_attention`` and
``reshape_and_cache_flash`` in ops.yaml runs on each layout, in each of the op's dtypes, against
the reference with the op's tolerances; the cache write also leaves every slot it does not map
as it was (the other half of the shared tensor included).

Marked ``gpu``: the flagos impls need FlagGems (its cache write on 0.24's layout), the cuda ones
vLLM's CUDA build.
"""

from __future__ import annotations

import pytest
import torch

from codegen.manifest import project_manifest
from tests.support.layer_samples import make_inputs
from vllm_fl.backends.flaggems.impl import attention as flagos
from vllm_fl.backends.reference.impl import attention as reference
from vllm_fl.backends.cuda.impl import attention as cuda

DEVICE = "cuda"
IMPLS = [
    pytest.param(flagos, marks=pytest.mark.gpu("vllm", "flag_gems"), id="flagos"),
    pytest.param(cuda, marks=pytest.mark.gpu("vllm"), id="cuda"),
]


def _vllm_0_24(key_cache: torch.Tensor, value_cache: torch.Tensor):
    combined = torch.stack([key_cache, value_cache], dim=1)
    return combined, combined.unbind(1)


def _vllm_0_24_hnd(key_cache: torch.Tensor, value_cache: torch.Tensor):
    # physically [num_blocks, 2, kv_heads, block_size, head_size]
    combined = torch.stack([key_cache, value_cache], dim=1).permute(0, 1, 3, 2, 4).contiguous()
    return combined, combined.permute(0, 1, 3, 2, 4).unbind(1)


def _vllm_0_32(key_cache: torch.Tensor, value_cache: torch.Tensor):
    dim = key_cache.shape[-1]
    combined = torch.cat([key_cache, value_cache], dim=-1).transpose(1, 2).contiguous()
    return combined, combined.transpose(1, 2).split(dim, dim=-1)


LAYOUTS = {"vllm-0.24": _vllm_0_24, "vllm-0.24-hnd": _vllm_0_24_hnd, "vllm-0.32": _vllm_0_32}


def _cases(op_name: str):
    op = next(o for o in project_manifest().ops if o.name == op_name)
    tolerances = dict(op.tests.tolerances)
    for index, case in enumerate(op.tests.cases):
        for dtype in op.tests.dtypes:
            yield pytest.param(
                dict(case.inputs), dtype, tolerances[dtype], id=f"case{index}-{dtype}"
            )


def _on_device(spec: dict, dtype: str) -> dict:
    inputs = make_inputs(spec, seed=1, dtype=getattr(torch, dtype))
    return {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("spec, dtype, tolerance", _cases("paged_attention"))
@pytest.mark.parametrize("impl", IMPLS)
def test_paged_attention_on_vllms_caches(impl, spec, dtype, tolerance, layout):
    inputs = _on_device(spec, dtype)
    expected = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    reference.paged_attention(**expected)
    combined, (key_cache, value_cache) = LAYOUTS[layout](inputs["key_cache"], inputs["value_cache"])
    before = combined.clone()
    impl.paged_attention(**{**inputs, "key_cache": key_cache, "value_cache": value_cache})
    torch.cuda.synchronize()
    torch.testing.assert_close(
        inputs["output"].float(),
        expected["output"].float(),
        atol=tolerance.atol,
        rtol=tolerance.rtol,
    )
    assert torch.equal(combined, before), "paged_attention wrote into the KV cache"


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("spec, dtype, tolerance", _cases("reshape_and_cache_flash"))
@pytest.mark.parametrize("impl", IMPLS)
def test_reshape_and_cache_flash_into_vllms_caches(impl, spec, dtype, tolerance, layout):
    inputs = _on_device(spec, dtype)
    expected = {k: v.clone() for k, v in inputs.items()}
    reference.reshape_and_cache_flash(**expected)
    combined, (key_cache, value_cache) = LAYOUTS[layout](inputs["key_cache"], inputs["value_cache"])
    impl.reshape_and_cache_flash(
        inputs["key"], inputs["value"], key_cache, value_cache, inputs["slot_mapping"]
    )
    torch.cuda.synchronize()
    # every element of the shared tensor: the mapped slots written, everything else unchanged
    _, (expected_k, expected_v) = LAYOUTS[layout](expected["key_cache"], expected["value_cache"])
    assert torch.equal(key_cache, expected_k) and torch.equal(value_cache, expected_v)

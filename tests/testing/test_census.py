"""The census of vLLM's own kernels: MoE and attention kernels counted apart from the rest, the
layers' own wrappers and everything that is not vLLM's left out."""

from __future__ import annotations

import types

import pytest

from vllm_fl.testing.census import census


def _event(key: str, count: int):
    return types.SimpleNamespace(key=key, count=count)


def test_vllms_ops_are_counted_moe_and_attention_kernels_apart():
    events = [
        _event("_moe_C::topk_softmax", 4),
        _event("_C::cpu_fused_moe", 8),
        _event("_C::rms_norm", 16),
        _event("_C::cpu_attention_with_kv_cache", 8),
        _event("_C::cpu_attn_reshape_and_cache", 8),
        _event("_C_cache_ops::reshape_and_cache_flash", 2),
        _event("_vllm_fa3_C::fwd", 2),
        # the layers' wrappers: ours runs inside them
        _event("vllm::unified_attention_with_output", 8),
        _event("vllm::unified_kv_cache_update", 8),
        _event("vllm::moe_forward", 8),
        _event("aten::mm", 99),  # not vLLM's
        _event("_C::rms_norm", 2),
    ]
    assert census(events) == {
        "moe": {"_moe_C::topk_softmax": 4, "_C::cpu_fused_moe": 8},
        "attention": {
            "_C::cpu_attention_with_kv_cache": 8,
            "_C::cpu_attn_reshape_and_cache": 8,
            "_C_cache_ops::reshape_and_cache_flash": 2,
            "_vllm_fa3_C::fwd": 2,
        },
        "other": {"_C::rms_norm": 18},
    }


def test_cuda_kernels_are_sorted_by_origin():
    from vllm_fl.testing.census import kernel_origin

    cases = {
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)": "aten",
        "void cub::DeviceRadixSortOnesweepKernel<int>(int)": "aten",
        "Memcpy HtoD (Pageable -> Device)": "aten",
        "nvjet_tst_128x64_64x8_1x1_v_bz_coopA_TNN": "cublas",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "cublas",
        "_rms_norm_kernel": "triton",
        "triton_poi_fused_add_mul_0": "triton",
        "fused_moe_kernel": "triton",
        "void vllm::rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, int)": "compiled",
        # vLLM's CUTLASS GEMM names vLLM in its template arguments: not cuBLAS
        "void cutlass::device_kernel<vllm::cutlass_3x_gemm_sm90_fp8<float>>(int)": "compiled",
        "void deep_gemm::sm90_fp8_gemm_1d2d_impl<128u, 128u>(float*, int)": "compiled",
        # vLLM's _C kernels outside its namespace, with c10 types in their template arguments
        "void per_token_group_quant_8bit_kernel<c10::BFloat16, c10::Float8_e4m3fn, true, true, "
        "float>(c10::BFloat16 const*, void*, float*, int, int, int, float)": "compiled",
        "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128>>(Flash_fwd_params)": "compiled",
    }
    assert {name: kernel_origin(name) for name in cases} == cases


def _sequence(ids, logprobs):
    return {"token_ids": ids, "logprobs": logprobs}


def test_outputs_are_compared_up_to_the_first_difference():
    from vllm_fl.testing.census import compare_outputs

    reference = [_sequence([1, 2, 3], [-0.1, -0.2, -0.3]), _sequence([4, 5, 6], [-1.0, -1.0, -1.0])]
    other = [
        _sequence([1, 2, 3], [-0.1, -0.25, -0.3]),
        # differs at the second token: its log-probability there still counts (same prefix),
        # the third's does not
        _sequence([4, 9, 6], [-1.0, -1.5, -9.0]),
    ]
    result = compare_outputs(reference, other)
    assert result["sequences"] == 2 and result["identical"] == 1
    assert result["tokens_agreeing"] == 3 + 1 and result["tokens"] == 6
    assert abs(result["max_logprob_diff"] - 0.5) < 1e-9
    with pytest.raises(ValueError, match="1 sequences against 2"):
        compare_outputs(reference, other[:1])


def test_embeddings_are_compared_by_their_largest_difference_and_cosine():
    from vllm_fl.testing.census import compare_embeddings

    reference = [[1.0, 0.0], [0.0, 2.0]]
    other = [[1.0, 0.1], [0.0, 2.0]]
    found = compare_embeddings(reference, other)
    assert found["embeddings"] == 2
    assert found["max_abs_diff"] == pytest.approx(0.1)
    assert found["min_cosine"] == pytest.approx(1 / (1.01**0.5))
    with pytest.raises(ValueError):
        compare_embeddings(reference, other[:1])

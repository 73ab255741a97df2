"""The flagos ``wna16_gemm`` on CPU: 4-bit weights go to vLLM's portable Triton W4A16 kernel,
run here in Triton's interpreter, so the canonical layout is checked against the kernel that
reads it; 8-bit weights take the dequantised matmul. Compared with the reference."""

from __future__ import annotations

import importlib.util
import inspect
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
triton_w4a16 = pytest.importorskip(
    "vllm.model_executor.kernels.linear.mixed_precision.triton_w4a16"
)

from triton_helpers import interpret, needs_interpreter_loops  # noqa: E402
from vllm_fl.backends.flaggems.impl import wna16 as flagos  # noqa: E402
from vllm_fl.backends.reference.impl import wna16 as reference  # noqa: E402
from vllm_fl.kernels import wna16 as packing  # noqa: E402


def _real_kernel(tmp_path):
    """vLLM's kernel compiled by the real Triton: vLLM's CPU build swaps Triton for a
    placeholder (no CPU backend), so its source is loaded again under ``triton.jit``."""
    kernel = triton_w4a16.triton_w4a16_gemm_kernel
    kernel = getattr(kernel, "fn", kernel)
    source = textwrap.dedent(inspect.getsource(kernel))
    body = source[source.index("def ") :]
    path = tmp_path / "w4a16_kernel.py"
    path.write_text("import triton\nimport triton.language as tl\n\n@triton.jit\n" + body)
    spec = importlib.util.spec_from_file_location("w4a16_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, kernel.__name__)


class _Interpreted:
    def __init__(self, kernel):
        self.kernel = kernel
        self.launches = 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches += 1
            interpret(self.kernel, grid, args, kwargs)

        return launch


@pytest.fixture
def interpreted(monkeypatch, tmp_path):
    launches = _Interpreted(_real_kernel(tmp_path))
    monkeypatch.setattr(triton_w4a16, "triton_w4a16_gemm_kernel", launches)
    return launches


@needs_interpreter_loops
@pytest.mark.parametrize("zero_points", [False, True])
@pytest.mark.parametrize("group", [32, 128, -1])
def test_4_bit_weights_run_vllms_triton_kernel_on_the_canonical_layout(
    interpreted, group, zero_points
):
    k, n = 256, 128
    qweight, scales, qzeros = packing.quantize(torch.randn(k, n), 4, group, zero_points)
    scales = scales.to(torch.float16)
    x = torch.randn(5, k, dtype=torch.float16)
    bias = torch.randn(n, dtype=torch.float16)
    out = flagos.wna16_gemm(x, qweight, scales, 4, group, qzeros, bias)
    assert interpreted.launches == 1
    expected = reference.wna16_gemm(x, qweight, scales, 4, group, qzeros, bias)
    assert out.shape == (5, n) and out.dtype == torch.float16
    torch.testing.assert_close(out, expected, atol=0.1, rtol=0.02)


@pytest.mark.parametrize("zero_points", [False, True])
def test_8_bit_weights_are_dequantised_and_multiplied(interpreted, zero_points):
    k, n = 128, 64
    qweight, scales, qzeros = packing.quantize(torch.randn(k, n), 8, 64, zero_points)
    x = torch.randn(2, 3, k)
    out = flagos.wna16_gemm(x, qweight, scales, 8, 64, qzeros)
    assert interpreted.launches == 0
    torch.testing.assert_close(out, reference.wna16_gemm(x, qweight, scales, 8, 64, qzeros))


def test_bad_arguments_fail_as_in_the_reference():
    qweight = torch.zeros(256, 16, dtype=torch.int32)
    x = torch.zeros(2, 256, dtype=torch.float16)
    for impl in (flagos.wna16_gemm, reference.wna16_gemm):
        with pytest.raises(ValueError, match="group_size is 96, expected -1 or a positive"):
            impl(x, qweight, torch.ones(2, 128, dtype=torch.float16), 4, 96)
        with pytest.raises(
            ValueError,
            match=r"wna16_gemm: argument 'scales' has shape \[4, 128\], expected \[2, 128\]",
        ):
            impl(x, qweight, torch.ones(4, 128, dtype=torch.float16), 4, 128)
        with pytest.raises(
            ValueError,
            match=r"wna16_gemm: argument 'qzeros' has shape \[2, 128\], expected \[2, 16\]",
        ):
            impl(
                x,
                qweight,
                torch.ones(2, 128, dtype=torch.float16),
                4,
                128,
                torch.zeros(2, 128, dtype=torch.int32),
            )
        with pytest.raises(ValueError, match=r"bits is 2, expected one of \[4, 8\]"):
            impl(x, qweight, torch.ones(2, 64, dtype=torch.float16), 2, 128)
        with pytest.raises(
            ValueError, match=r"argument 'qweight' has shape \[256, 16\], expected \[128, \*\]"
        ):
            impl(x[:, :128], qweight, torch.ones(1, 128, dtype=torch.float16), 4, -1)

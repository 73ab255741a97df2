"""Running the kernel library's own Triton kernels without a GPU: in Triton's interpreter on CPU
tensors, and through Triton's compiler to an H100 cubin (its NVIDIA backend compiles without a
driver)."""

from __future__ import annotations

import functools
from typing import Any

import pytest


def interpret(kernel: Any, grid: tuple[int, ...], args: tuple, kwargs: dict[str, Any]) -> None:
    """``kernel[grid](*args, **kwargs)`` in Triton's interpreter (launch options dropped).

    With TRITON_INTERPRET unset at import, ``tl.sum``, ``tl.argmax`` and the other functions of
    Triton's standard library are compiled-kernel functions that refuse calls outside a kernel;
    while the interpreter runs, they are interpreted device functions, as TRITON_INTERPRET=1
    makes them."""
    from triton.runtime.interpreter import InterpretedFunction, _patch_lang
    from triton.runtime.jit import JITFunction

    def device_call(self, *call_args, **call_kwargs):
        # as InterpretedFunction.__call__, but undoing its patches of triton.language after
        # the call: left in place, they break every later compilation in this process
        scope = _patch_lang(self.fn)
        try:
            return InterpretedFunction(self.fn).rewrite()(*call_args, **call_kwargs)
        finally:
            scope.restore()

    constexprs = {k: v for k, v in kwargs.items() if k not in ("num_warps", "num_stages")}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(JITFunction, "__call__", device_call)
        InterpretedFunction(kernel.fn)[grid](*args, **constexprs)


@functools.cache
def _interpreter_takes_runtime_loop_bounds() -> bool:
    """Whether this Triton's interpreter runs ``for i in range(0, n, BLOCK)`` with ``n`` an
    argument (3.6's converts it with ``int()`` of a one-element array, which numpy 2 refuses)."""
    import torch
    from triton.runtime.errors import InterpreterError

    from loop_probe import count_up

    out = torch.zeros(2, dtype=torch.int32)
    try:
        interpret(count_up, (1,), (out, 2), {})
    except InterpreterError:
        return False
    return out.tolist() == [0, 1]


needs_interpreter_loops = pytest.mark.skipif(
    "not __import__('triton_helpers')._interpreter_takes_runtime_loop_bounds()",
    reason="this Triton's interpreter cannot loop to a runtime bound (fixed in later releases)",
)


def _nvidia_backend() -> bool:
    try:
        from triton.backends import backends
    except ImportError:
        return False
    return "nvidia" in backends


needs_nvidia_compiler = pytest.mark.skipif(
    not _nvidia_backend(), reason="needs Triton's NVIDIA backend to compile"
)


def compile_for_h100(
    kernel: Any, signature: dict[str, str], constexprs: dict[str, Any], num_warps: int
) -> bytes:
    """The cubin Triton compiles ``kernel`` to for sm_90, as the GPU does at its first launch."""
    import triton
    from triton.backends.compiler import GPUTarget

    full = {**signature, **{name: "constexpr" for name in constexprs}}
    source = triton.compiler.ASTSource(fn=kernel, signature=full, constexprs=constexprs)
    compiled = triton.compile(
        source, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps}
    )
    return compiled.asm["cubin"]

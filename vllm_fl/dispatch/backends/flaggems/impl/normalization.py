"""FlagGems RMS normalisations.

With a residual, FlagGems' ``fused_add_rms_norm`` writes both results into its inputs. Our
impls are functional, so instead of cloning x and residual for it (two extra copies: 8
passes over the activations in all) the backend's add-and-normalise kernel writes both results
into new tensors (4 passes, one launch); where it does not apply, torch adds and FlagGems'
out-of-place kernel normalises the sum. The sum is rounded to x's dtype before it is
normalised, as vLLM's own CUDA kernel does; vLLM's native path normalises the float32 sum (the
difference is within the parity tolerances). Outside torch.compile, ``rms_norm_inplace`` (the op's eager
variant) calls ``fused_add_rms_norm`` in place instead, as vLLM does: one launch, 4 passes.

FlagGems' ``rms_norm`` and ``fused_add_rms_norm`` kernels are launched through the backend's
launch plans (``launch.py``) with the arguments FlagGems' own functions pass them; the
add-and-normalise kernel (``norm_kernel.py``) has the arithmetic of FlagGems' rms_norm kernel.
So does the backend's rows kernel (``norm_kernel.py``), which normalises views of strided rows
(Qwen3's per-head query and key norms on [tokens, heads, head_size] views of the qkv
projection) where FlagGems' function would copy them first.
"""

import torch

from vllm_fl.dispatch.backends.flaggems import launch
from vllm_fl.dispatch.backends.flaggems.memo import TensorMemo

_ONE_BLOCK_MAX = 4096  # FlagGems: rows up to this width run in one block, wider ones loop


def _rows(x: torch.Tensor) -> tuple[int, int]:
    n = x.shape[-1]
    return (x.numel() // n if n else 0), n


def _normalize(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x * rrms(x) * weight over the last dimension, out of place: FlagGems' rms_norm kernels
    for contiguous x, the backend's rows kernel (``norm_kernel.py``) for views of strided rows,
    FlagGems' function for the rest."""
    if x.numel() and launch.on_current_gpu(x) and weight.is_contiguous():
        if x.is_contiguous():
            out = _through_flag_gems_kernels(x, weight, eps)
        else:
            out = _strided_rows(x, weight, eps)
        if out is not None:
            return out
    import flag_gems

    return flag_gems.rms_norm(x, [x.shape[-1]], weight, eps)


def _through_flag_gems_kernels(x, weight, eps) -> torch.Tensor | None:
    m, n = _rows(x)
    wide = n > _ONE_BLOCK_MAX
    plans = launch.plans_of("rms_norm", "rms_norm_loop_kernel" if wide else "rms_norm_kernel")
    if plans is None or not launch.aligned(x, weight):
        return None
    out = torch.empty_like(x)
    inv_rms = launch.sink(m, x.device)  # FlagGems' kernels also store 1/rms per row
    key = (x.dtype, weight.dtype, n, x.device.index)
    if wide:
        plans.launch(key, (m,), (out, inv_rms, x, weight, n, eps), {})
    else:
        block = launch.next_pow2(n)
        args = (out, inv_rms, x, weight, n, 1, n, 1, n, eps)
        plans.launch(key, (m,), args, {"BLOCK_SIZE": block})
    return out


def _strided_rows(x, weight, eps) -> torch.Tensor | None:
    """The rows kernel into a new contiguous tensor; its launch is bound to the call's layout
    (a layer's per-head norm calls with the same view step after step)."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    found = launch.pointers(x, weight, out)
    if found is None:
        return None
    plans = launch.own_plans("norm_kernel", "rms_norm_rows_kernel")
    signature = (x.shape, x.stride(), x.dtype, weight.dtype, x.get_device(), eps)
    if plans.launch_bound(signature, found):
        return out
    planned = launch.own("norm_kernel").rms_norm_rows_launch(x, weight, eps, out)
    if planned is None:
        return None
    plans.run(planned, signature, dynamic=3)
    return out


def _add_and_normalize(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual) as new tensors: the backend's one-launch kernel
    (``norm_kernel.py``), or torch's add and FlagGems' rms_norm kernel where it does not apply."""
    if launch.on_current_gpu(x):
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        total = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        if x.dim() == 2:
            flat = (x, residual, weight, eps, out, total)
        elif x.is_contiguous() and residual.is_contiguous():
            n = x.shape[-1]
            flat = (
                x.view(-1, n),
                residual.view(-1, n),
                weight,
                eps,
                out.view(-1, n),
                total.view(-1, n),
            )
        else:
            flat = None
        planned = None if flat is None else launch.own("norm_kernel").add_rms_norm_launch(*flat)
        if planned is not None and launch.aligned(x, residual, weight):
            launch.own_plans("norm_kernel", "add_rms_norm_kernel").run(planned)
            return out, total
    total = x + residual
    return _normalize(total, weight, eps), total


def rms_norm(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FlagGems' rms_norm kernel (out of place); with a residual, on x + residual in one launch
    (``norm_kernel.py``)."""
    weight = self.weight.data
    if residual is None:
        return _normalize(x, weight, self.variance_epsilon)
    return _add_and_normalize(x, residual, weight, self.variance_epsilon)


def rms_norm_inplace(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The eager variant: with a residual, FlagGems' ``fused_add_rms_norm`` kernel in place,
    returning (x, residual) holding (rms_norm(x + r), x + r).

    Without a residual, or with non-contiguous inputs (which the kernel may copy rather than
    overwrite), the functional ``rms_norm``.
    """
    if residual is None or not (x.is_contiguous() and residual.is_contiguous()):
        return rms_norm(self, x, residual)
    weight = self.weight  # the parameter itself: ``.data`` makes a tensor object per call
    eps = self.variance_epsilon
    plans = launch.plans_of("fused_add_rms_norm", "fused_add_rms_norm_kernel")
    if (
        plans is not None
        and launch.on_current_gpu(x)
        and weight.is_contiguous()
        and (found := launch.pointers(x, residual, weight)) is not None
    ):
        # a layer's calls share all but the tensors (see KernelPlans.launch_bound)
        signature = (x.shape, x.dtype, residual.dtype, weight.dtype, x.get_device(), eps)
        if plans.launch_bound(signature, found):
            return x, residual
        m, n = _rows(x)
        if m:
            key = (x.dtype, residual.dtype, weight.dtype, n, x.device.index)
            args = (x, residual, weight, n, 1, n, 1, n, eps)
            kwargs = {"BLOCK_SIZE": launch.next_pow2(n)}
            plans.run(launch.Launch((m,), args, kwargs, key), signature, dynamic=3)
            return x, residual
    import flag_gems

    flag_gems.fused_add_rms_norm(x, residual, [x.shape[-1]], weight, eps)
    return x, residual


_gemma_weights = TensorMemo()  # Gemma's (1 + w) in float32, per weight tensor


def _gemma_weight(weight: torch.Tensor) -> torch.Tensor:
    return _gemma_weights.get(weight, None, lambda: weight.float() + 1.0)


def gemma_rms_norm(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Gemma's RMSNorm, x * rrms * (1 + w) computed in float32 and rounded once.

    FlagGems' rms_norm kernel with the float32 weight (1 + w) does exactly that in FlagGems
    5.0.2 (its kernel multiplies by the weight in float32 before the one rounding). Later
    FlagGems round the normalised x before the weight multiply, like vLLM's RMSNorm, and add
    ``flag_gems.gemma_rms_norm(module, x)`` for Gemma: it is used when present.
    """
    import flag_gems

    gemma = getattr(flag_gems, "gemma_rms_norm", None)
    if gemma is None and residual is not None:
        return _add_and_normalize(x, residual, _gemma_weight(self.weight), self.variance_epsilon)
    total = x if residual is None else x + residual
    if gemma is not None:
        out = gemma(self, total)
    else:
        out = _normalize(total, _gemma_weight(self.weight), self.variance_epsilon)
    return out if residual is None else (out, total)

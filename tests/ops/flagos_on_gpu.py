"""Every flagos impl against the reference impl on a GPU with the real FlagGems, per dtype,
with the manifest's tolerances; beyond the generated parity tests' cases it covers strided
inputs, hidden sizes past FlagGems' single-block rms_norm kernel (8192), and q/k as views of
one qkv tensor. Not a pytest module (it needs CUDA and flag_gems); on the device machine:

    pip install --no-deps --target /tmp/fgsite flag_gems-5.0.2-py3-none-any.whl \
        sqlalchemy-*.whl greenlet-*.whl
    PYTHONPATH=/tmp/fgsite:$PWD python3 tests/ops/flagos_on_gpu.py

Exits non-zero on any mismatch, input mutation or aliasing.
"""

import math, sys, traceback
import torch
import flag_gems  # noqa: F401  (fail early if it does not import)
from vllm_fl.dispatch.backends.flaggems.impl import (
    activation as fa,
    normalization as fn,
    rotary as fr,
)
from vllm_fl.dispatch.backends.reference.impl import (
    activation as ra,
    normalization as rn,
    rotary as rr,
)

TOL = {torch.float32: (1e-5, 1.3e-6), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1.6e-2)}
dev = "cuda"


class L:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def cache(maxpos, rd):
    inv = 1.0 / (10000.0 ** (torch.arange(0, rd, 2, dtype=torch.float) / rd))
    f = torch.outer(torch.arange(maxpos, dtype=torch.float), inv)
    return torch.cat((f.cos(), f.sin()), -1).to(dev)


results = []


def check(name, dt, got, exp, inputs):
    atol, rtol = TOL[dt]
    got_t = got if isinstance(got, tuple) else (got,)
    exp_t = exp if isinstance(exp, tuple) else (exp,)
    ok = len(got_t) == len(exp_t)
    worst = 0.0
    for g, e in zip(got_t, exp_t):
        if e is None:
            ok &= g is None
            continue
        ok &= g.shape == e.shape and g.dtype == e.dtype
        ok &= all(
            g.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
            for t in inputs
            if t is not None
        )
        if g.shape == e.shape:
            ok &= torch.allclose(g.float(), e.float(), atol=atol, rtol=rtol)
            worst = max(worst, (g.float() - e.float()).abs().max().item())
    results.append(ok)
    print(("PASS" if ok else "FAIL"), name, str(dt).split(".")[-1], f"maxabs={worst:.3g}")


torch.manual_seed(0)
for dt in (torch.float32, torch.float16, torch.bfloat16):
    for shape in [(7, 256), (2, 3, 128), (1, 2 * 11008), (4096, 2 * 1408)]:
        x = torch.randn(shape, dtype=dt, device=dev)
        xc = x.clone()
        for op in ["silu_and_mul", "mul_and_silu", "gelu_new", "gelu_fast", "quick_gelu"]:
            try:
                check(
                    f"{op}{list(shape)}",
                    dt,
                    getattr(fa, op)(None, x),
                    getattr(ra, op)(None, x),
                    [x],
                )
            except Exception:
                traceback.print_exc()
                results.append(False)
        for ap in ("none", "tanh"):
            l = L(approximate=ap)
            try:
                check(
                    f"gelu_and_mul[{ap}]{list(shape)}",
                    dt,
                    fa.gelu_and_mul(l, x),
                    ra.gelu_and_mul(l, x),
                    [x],
                )
            except Exception:
                traceback.print_exc()
                results.append(False)
        assert torch.equal(x, xc), "input mutated"
    # non-contiguous activation input (a column slice)
    big = torch.randn(7, 1024, dtype=dt, device=dev)
    xs = big[:, :512]
    check("silu_and_mul[strided]", dt, fa.silu_and_mul(None, xs), ra.silu_and_mul(None, xs), [big])
    for hidden in (256, 4096, 8192):
        for wdt in (dt, torch.float32):
            for op in ("rms_norm", "gemma_rms_norm"):
                w = (torch.randn(hidden, device=dev) * 0.5).to(wdt)
                l = L(weight=w, variance_epsilon=1e-6)
                x = torch.randn(7, hidden, dtype=dt, device=dev)
                r = torch.randn(7, hidden, dtype=dt, device=dev)
                xc, rc = x.clone(), r.clone()
                try:
                    check(
                        f"{op}[h={hidden},w={str(wdt).split('.')[-1]}]",
                        dt,
                        getattr(fn, op)(l, x),
                        getattr(rn, op)(l, x),
                        [x, r, w],
                    )
                    check(
                        f"{op}+res[h={hidden},w={str(wdt).split('.')[-1]}]",
                        dt,
                        getattr(fn, op)(l, x, r),
                        getattr(rn, op)(l, x, r),
                        [x, r, w],
                    )
                except Exception:
                    traceback.print_exc()
                    results.append(False)
                assert torch.equal(x, xc) and torch.equal(r, rc), "input mutated"
    for head, rd, neox, with_key, nq, nk, T in [
        (64, 64, True, True, 4, 2, 7),
        (64, 64, False, True, 4, 2, 7),
        (64, 32, True, False, 4, 2, 7),
        (128, 128, True, True, 32, 8, 300),
        (128, 64, False, True, 8, 8, 33),
        (64, 64, False, False, 4, 2, 7),
    ]:
        l = L(cos_sin_cache=cache(4096, rd), head_size=head, rotary_dim=rd, is_neox_style=neox)
        pos = torch.randint(0, 4096, (T,), device=dev)
        q = torch.randn(T, nq * head, dtype=dt, device=dev)
        k = torch.randn(T, nk * head, dtype=dt, device=dev) if with_key else None
        qc = q.clone()
        try:
            check(
                f"rotary[h={head},rd={rd},neox={neox},key={with_key},T={T}]",
                dt,
                fr.rotary_embedding(l, pos, q, k),
                rr.rotary_embedding(l, pos, q, k),
                [q, k, pos],
            )
        except Exception:
            traceback.print_exc()
            results.append(False)
        assert torch.equal(q, qc), "input mutated"
    # q, k as strided views of one qkv tensor, as vLLM's attention layers pass them
    head = 128
    qkv = torch.randn(9, (8 + 2 + 2) * head, dtype=dt, device=dev)
    q, k, _ = qkv.split([8 * head, 2 * head, 2 * head], dim=-1)
    l = L(cos_sin_cache=cache(4096, head), head_size=head, rotary_dim=head, is_neox_style=True)
    pos = torch.randint(0, 4096, (9,), device=dev)
    check(
        "rotary[qkv views]",
        dt,
        fr.rotary_embedding(l, pos, q, k),
        rr.rotary_embedding(l, pos, q, k),
        [qkv],
    )
print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
sys.exit(0 if all(results) else 1)

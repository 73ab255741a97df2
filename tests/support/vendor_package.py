"""An out-of-tree vendor package as a vendor would make it: scaffolded by ``vllm-fl vendor``,
two impls written, available on CPU, generated, and installed for subprocesses (a dist-info with
its ``vllm_fl.plugin`` entry point, as pip records it)."""

from __future__ import annotations

import os
from pathlib import Path

from codegen import cli
from tests.support.plugin_env import REPO, write_dist_info

NAME = "mychip"
PACKAGE = f"vllm_fl_{NAME}"
ENTRY_POINT = f"{PACKAGE}.register_ops"
#: the ops its impls are written for
OPS = ("rms_norm", "silu_and_mul")
#: impls that compute what the reference does (a vendor's kernels would go there)
IMPLS = {
    "activation.py": '''import torch


def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
    """The mychip kernel."""
    d = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :d]) * x[..., d:]
''',
    "normalization.py": '''import torch

from vllm_fl.backends.reference.impl import normalization


def rms_norm(self, x: torch.Tensor, residual: torch.Tensor | None = None):
    """The mychip kernel."""
    return normalization.rms_norm(self, x, residual)
''',
}


#: an op of the package's own, declared under ``ops:`` of its vendor.yaml (lines 21-32 of the
#: scaffold of ``OPS``)
NEW_OP = "scaled_silu"
NEW_OP_YAML = """\
ops:
  scaled_silu:
    signature: scaled_silu(Tensor x, float scale=1.0) -> Tensor
    doc: silu(x) * scale.
    impls:
      reference: reference.scaled_silu
      mychip: activation.scaled_silu
    tests:
      dtypes: [float32, bfloat16]
      cases:
        - inputs: {x: [7, 256], scale: 0.5}
        - inputs: {x: [3, 64]}
"""
#: its reference (the package's) and the mychip kernel
NEW_OP_REFERENCE = '''import torch


def scaled_silu(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """The package's reference."""
    return torch.nn.functional.silu(x) * scale
'''
NEW_OP_KERNEL = '''

def scaled_silu(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """The mychip kernel."""
    return torch.nn.functional.silu(x) * scale
'''


def scaffold(folder: Path, ops: str = ",".join(OPS), name: str = NAME) -> Path:
    """``vllm-fl vendor NAME --ops OPS --out <folder>/vllm-fl-mychip``; returns the package."""
    out = folder / "vllm-fl-mychip"
    assert cli.vendor([name, "--ops", ops, "--out", str(out), "-q"]) == 0
    return out


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


def installed(folder: Path, new_op: bool = False) -> tuple[Path, str]:
    """The package with its impls written, on CPU (with ``NEW_OP`` declared and written if
    ``new_op``), regenerated; and the PYTHONPATH of a process where it is installed."""
    out = scaffold(folder)
    edit(out / "vendor.yaml", "    requires: [torch_mychip]\n", "    device: cpu\n")
    for module, text in IMPLS.items():
        (out / PACKAGE / "impl" / module).write_text(text)
    if new_op:
        with (out / "vendor.yaml").open("a") as manifest:
            manifest.write(NEW_OP_YAML)
        (out / PACKAGE / "impl/reference.py").write_text(NEW_OP_REFERENCE)
        with (out / PACKAGE / "impl/activation.py").open("a") as kernels:
            kernels.write(NEW_OP_KERNEL)
    assert cli.generate(["--root", str(out), "-q"]) == 0
    site = write_dist_info(
        folder / "site", "vllm-fl-mychip", "0.1.0", {"vllm_fl.plugin": {NAME: ENTRY_POINT}}
    )
    path = [str(site), str(out), str(REPO), os.environ.get("PYTHONPATH", "")]
    return out, os.pathsep.join(p for p in path if p)

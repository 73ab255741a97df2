"""The package: its public names, and what importing it pulls in."""

import os
import subprocess
import sys
import textwrap

import vllm_fl.dispatch as d
from vllm_fl.dispatch import BackendImplKind, BackendPriority


PUBLIC = [
    "OpImpl",
    "BackendImplKind",
    "BackendPriority",
    "OpRegistry",
    "SelectionPolicy",
    "get_policy",
    "set_global_policy",
    "reset_global_policy",
    "policy_context",
    "with_strict_mode",
    "with_preference",
    "with_allowed_vendors",
    "with_denied_vendors",
    "OpManager",
    "get_default_manager",
    "reset_default_manager",
    "call_op",
    "resolve_op",
    "call_method_op",
    "dispatch_method",
    "Probe",
    "oot_allowed",
    "used_impls",
    "read_env",
    "env_text",
    "get_logger",
    "configure_logger",
    "wrap_selections",
    "Backend",
    "DeclaredBackend",
    "Impl",
    "CustomOp",
    "Registrations",
    "attrs",
    "flatten",
    "check_shape",
    "FLBackendBase",
    "CHECKS",
]


def test_public_api_names():
    for name in PUBLIC:
        assert hasattr(d, name), name
        assert name in d.__all__
    assert BackendImplKind.DEFAULT.value == "flagos"
    assert BackendImplKind.VENDOR.value == "vendor"
    assert BackendImplKind.REFERENCE.value == "reference"
    assert (BackendPriority.DEFAULT, BackendPriority.VENDOR, BackendPriority.REFERENCE) == (
        150,
        100,
        50,
    )
    sp = d.SelectionPolicy.from_dict(
        prefer="vendor",
        strict=True,
        per_op_order={"x": ["reference"]},
        deny_vendors=["ascend"],
        allow_vendors=["cuda"],
    )
    assert sp.prefer == "vendor" and sp.strict and sp.per_op_order["x"] == ("reference",)
    assert sp.deny_vendors == {"ascend"} and sp.allow_vendors == {"cuda"}


def run_py(code, env=None):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env
    )


def test_import_pulls_in_no_vllm_flaggems_torch_npu():
    r = run_py(
        """
        import sys
        import vllm_fl.dispatch
        from vllm_fl.dispatch import get_policy, SelectionPolicy
        get_policy()
        bad = [m for m in sys.modules if m.split('.')[0] in ('vllm', 'flag_gems', 'torch_npu')]
        print(bad)
    """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_import_pulls_in_no_torch_and_the_lazy_names_come_on_first_use():
    r = run_py(
        """
        import sys
        import vllm_fl.dispatch as d
        print("torch" in sys.modules, "vllm_fl.dispatch.runtime.registration" in sys.modules)
        from vllm_fl.dispatch import CHECKS, Backend, DeclaredBackend, Registrations
        print("torch" in sys.modules, set(d._LAZY) <= set(dir(d)))
        from vllm_fl.dispatch import check_shape
        print("torch" in sys.modules, check_shape is d.check_shape)
    """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "False", "True", "True", "True"]

"""Names only the registry knows (ops, impl and vendor tokens, vendor lists): a name nobody
registered is a WARNING naming the setting's source and the closest known names."""

import json
import logging

import pytest
from dispatch_helpers import build_default as build, write


def warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def warned(caplog, *parts):
    """Whether one WARNING holds every one of ``parts``."""
    return any(all(part in w for part in parts) for w in warnings(caplog))


def test_unknown_op_in_per_op_warns(clean_dispatch_env, fake_builtins, caplog_dispatch):
    build(clean_dispatch_env, VLLM_FL_PER_OP="rms_nrom=reference")
    assert warned(
        caplog_dispatch, "env VLLM_FL_PER_OP", "'rms_nrom'", "no registered op", "rms_norm"
    ), warnings(caplog_dispatch)


def test_unknown_op_in_config_file_and_op_config_warns(
    clean_dispatch_env, fake_builtins, caplog_dispatch, tmp_path
):
    path = write(tmp_path, "c.yaml", "op_backends:\n  silu: [reference]\n")
    build(clean_dispatch_env, VLLM_FL_CONFIG=path)
    assert any(path in w and "'silu'" in w for w in warnings(caplog_dispatch))
    caplog_dispatch.clear()
    clean_dispatch_env.delenv("VLLM_FL_CONFIG")
    ops = write(tmp_path, "ops.json", json.dumps({"op_backends": {"gelu": ["flagos"]}}))
    build(clean_dispatch_env, VLLM_FL_OP_CONFIG=ops)
    assert any("VLLM_FL_OP_CONFIG" in w and "'gelu'" in w for w in warnings(caplog_dispatch))


def test_impl_token_naming_no_impl_warns(clean_dispatch_env, fake_builtins, caplog_dispatch):
    build(clean_dispatch_env, VLLM_FL_PER_OP="rms_norm=impl:vendor.cdua|reference")
    assert warned(
        caplog_dispatch, "'impl:vendor.cdua'", "no registered impl of op 'rms_norm'", "vendor.cuda"
    ), warnings(caplog_dispatch)


@pytest.mark.parametrize("var", ["VLLM_FL_ALLOW_VENDORS", "VLLM_FL_DENY_VENDORS"])
def test_vendor_no_backend_declares_warns(clean_dispatch_env, fake_builtins, caplog_dispatch, var):
    build(clean_dispatch_env, **{var: "cdua"})
    assert warned(caplog_dispatch, f"env {var}", "'cdua'", "no backend declares", "cuda"), warnings(
        caplog_dispatch
    )


def test_vendor_token_naming_unknown_vendor_warns(
    clean_dispatch_env, fake_builtins, caplog_dispatch
):
    build(clean_dispatch_env, VLLM_FL_PER_OP="rms_norm=vendor:cdua|reference")
    assert any("'vendor:cdua'" in w for w in warnings(caplog_dispatch)), warnings(caplog_dispatch)


def test_known_names_do_not_warn(clean_dispatch_env, fake_builtins, caplog_dispatch):
    build(
        clean_dispatch_env,
        VLLM_FL_PER_OP="rms_norm=impl:vendor.cuda|vendor:cuda|reference",
        VLLM_FL_DENY_VENDORS="cuda",
    )
    assert warnings(caplog_dispatch) == []

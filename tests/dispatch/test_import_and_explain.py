"""Import hygiene and `python -m vllm_fl.dispatch explain`."""

import os
import subprocess
import sys
import textwrap

from vllm_fl.dispatch import OpImpl, OpManager, OpRegistry, Probe, SelectionPolicy, policy_context
from vllm_fl.dispatch.explain import explain, explain_table


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


def fn(self, x):
    return x


def manager():
    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("rms_norm", "default.flagos", "flagos", fn, available=Probe(("no_such_gems",))),
            OpImpl("rms_norm", "vendor.cuda", "vendor", fn, vendor="cuda"),
            OpImpl("rms_norm", "reference.torch", "reference", fn),
            OpImpl("silu_and_mul", "reference.torch", "reference", fn),
        ]
    )
    return OpManager(registry=reg)


def test_explain_lists_candidates_reasons_selection_and_sources(clean_dispatch_env):
    clean_dispatch_env.setenv("VLLM_FL_DENY_VENDORS", "cuda")
    from vllm_fl.dispatch import reset_global_policy

    reset_global_policy()
    text = explain(manager())
    assert "Op 'rms_norm': order flagos > vendor > reference from prefer=flagos (default)" in text
    assert "1. reference.torch" in text
    assert (
        "default.flagos" in text
        and "unavailable: module 'no_such_gems' not importable: ModuleNotFoundError" in text
    )
    assert "excluded: vendor 'cuda' in deny_vendors (env VLLM_FL_DENY_VENDORS)" in text
    assert "selected: reference.torch" in text
    assert "Op 'silu_and_mul'" in text
    lines = {
        line.split()[0]: line
        for line in text.splitlines()
        if line.startswith("  ") and len(line.split()) > 1
    }
    assert lines["prefer"].endswith("default")
    assert lines["deny_vendors"].endswith("env VLLM_FL_DENY_VENDORS")
    assert lines["platform"].endswith("env VLLM_FL_PLATFORM")


def test_explain_shows_per_op_restriction_and_table():
    m = manager()
    with policy_context(
        SelectionPolicy.from_dict(per_op_order={"rms_norm": ["vendor", "reference"]})
    ):
        text = explain(m)
        assert (
            "order vendor > reference from op_backends (SelectionPolicy.from_dict), restricts"
            in text
        )
        assert "1. vendor.cuda" in text and "2. reference.torch" in text
        table = explain_table(m)
    rows = [r.split("|") for r in table.splitlines()]
    assert [c.strip() for c in rows[0]] == [
        "op",
        "selected impl",
        "candidates (best first) [not candidates]",
    ]
    assert [c.strip() for c in rows[2]] == [
        "rms_norm",
        "vendor.cuda",
        "vendor.cuda > reference.torch [default.flagos]",
    ]
    assert [c.strip() for c in rows[3]] == ["silu_and_mul", "reference.torch", "reference.torch"]
    assert m.used_impls() == {}  # explain selects nothing


def test_cli_explain_subprocess(tmp_path):
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text(
        "from vllm_fl.dispatch import OpImpl\n"
        "def f(x):\n    return x\n"
        "def register(reg):\n    reg.register_impl(OpImpl('my_op', 'reference.mine', 'reference', f))\n"
    )
    env = {
        "PYTHONPATH": str(tmp_path),
        "VLLM_FL_PLUGIN_MODULES": "my_plugin",
        "VLLM_FL_PREFER": "vendor",
    }
    r = subprocess.run(
        [sys.executable, "-m", "vllm_fl.dispatch", "explain"],
        capture_output=True,
        text=True,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}, **env},
    )
    assert r.returncode == 0, r.stderr
    assert (
        "Op 'my_op': order vendor > flagos > reference from prefer=vendor (env VLLM_FL_PREFER)"
        in r.stdout
    )
    assert "selected: reference.mine" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "vllm_fl.dispatch", "explain", "--table"],
        capture_output=True,
        text=True,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}, **env},
    )
    assert r.returncode == 0 and "my_op" in r.stdout and "| reference.mine" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "vllm_fl.dispatch", "explain"],
        capture_output=True,
        text=True,
        env={**os.environ, "VLLM_FL_STRICT": "maybe"},
    )
    assert r.returncode == 2 and "VLLM_FL_STRICT='maybe': invalid boolean" in r.stderr


def relu2(self, x):
    """A stub as `make codegen` scaffolds one."""
    raise NotImplementedError(
        "flagos relu2: write the kernel here, "
        "matching FLBackendBase.relu2 (vllm_fl/dispatch/spec.py)"
    )


def adapter(self, x):
    return adapter.functional(self, x)


adapter.functional = relu2


def test_explain_marks_scaffolded_stubs_instead_of_available():
    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("relu2", "default.flagos", "flagos", relu2),
            OpImpl("relu2", "vendor.cuda", "vendor", adapter, vendor="cuda"),
            OpImpl(
                "relu2",
                "vendor.ascend",
                "vendor",
                relu2,
                vendor="ascend",
                available=Probe(("no_such_npu",)),
            ),
            OpImpl("relu2", "reference.torch", "reference", fn),
        ]
    )
    m = OpManager(registry=reg)
    with policy_context(SelectionPolicy()):
        lines = explain(m).splitlines()
        table = explain_table(m)
    by_id = {line.split()[1]: line for line in lines if line.startswith("  ") and "kind=" in line}
    stub = f"stub: {__name__}.relu2 is still the stub `make codegen` scaffolded (it raises)"
    assert by_id["default.flagos"].endswith(stub)
    assert by_id["vendor.cuda"].endswith(stub)  # the adapter's impl is the stub
    assert "not importable" in by_id["vendor.ascend"] and by_id["vendor.ascend"].endswith(stub)
    assert by_id["reference.torch"].endswith(" available")
    row = next(r for r in table.splitlines() if r.startswith("relu2"))
    assert [c.strip() for c in row.split("|")] == [
        "relu2",
        "default.flagos (stub)",
        "default.flagos (stub) > vendor.cuda (stub) > reference.torch [vendor.ascend (stub)]",
    ]

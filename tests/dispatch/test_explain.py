"""``explain``: every op's candidates with the reason each other impl is not one, the selection
(also under torch.compile), the settings with their sources, and unknown names."""

from dispatch_helpers import SPLIT, act_manager as _act_manager, build_default as build

from vllm_fl.dispatch import OpImpl, OpManager, OpRegistry, Probe, SelectionPolicy, policy_context
from vllm_fl.dispatch.explain import explain, explain_table


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


def test_explain_shows_the_traced_selection():
    m, _, _ = _act_manager()
    with policy_context(SPLIT):
        table = explain_table(m)
        report = explain(m)
    header, _, row = table.splitlines()[:3]
    assert "under torch.compile" in header
    assert [c.strip() for c in row.split("|")][:3] == ["act", "default.flagos", "reference.torch"]
    assert "under torch.compile: reference.torch" in report
    assert "under torch.compile" not in explain_table(m)


def test_explain_lists_unknown_names(clean_dispatch_env, fake_builtins):
    from vllm_fl.dispatch.explain import explain

    build(clean_dispatch_env, VLLM_FL_DENY_VENDORS="cdua")
    text = explain()
    assert "Names no backend registered (typos?):" in text
    assert "deny_vendors lists 'cdua'" in text and "did you mean 'cuda'?" in text


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

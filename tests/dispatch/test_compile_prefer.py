"""compile_prefer: another selection for calls traced by torch.compile than for eager calls."""

import pytest

from vllm_fl.dispatch import (
    ConfigError,
    OpImpl,
    OpManager,
    OpRegistry,
    SelectionPolicy,
    dispatch_method,
    load_config,
    policy_context,
)
from vllm_fl.dispatch.explain import explain, explain_table

torch = pytest.importorskip("torch")


def cfg(**env):
    return load_config({"VLLM_FL_PLATFORM": "cpu", **env})


def test_compile_prefer_defaults_to_prefer_and_is_read_from_env_and_files(tmp_path):
    p = cfg().policy
    assert p.compile_prefer is None and not p.splits_traced
    assert p.order_for("op", traced=True) == p.order_for("op")
    p = cfg(VLLM_FL_PREFER="vendor", VLLM_FL_COMPILE_PREFER="Reference").policy
    assert (p.prefer, p.compile_prefer, p.splits_traced) == ("vendor", "reference", True)
    assert p.order_for("op", traced=True)[0][0] == "reference"
    assert p.sources["compile_prefer"] == "env VLLM_FL_COMPILE_PREFER"
    f = tmp_path / "c.yaml"
    f.write_text("prefer: flagos\ncompile_prefer: vendor\n")
    p = cfg(VLLM_FL_CONFIG=str(f)).policy
    assert (p.prefer, p.compile_prefer) == ("flagos", "vendor")


def test_env_prefer_applies_under_compile_unless_compile_prefer_is_set_too():
    shipped = cfg(VLLM_FL_PLATFORM="cuda").policy
    assert (shipped.prefer, shipped.compile_prefer) == ("vendor", "reference")
    p = cfg(VLLM_FL_PLATFORM="cuda", VLLM_FL_PREFER="flagos").policy
    assert (p.prefer, p.compile_prefer, p.splits_traced) == ("flagos", None, False)
    assert p.sources["compile_prefer"] == "env VLLM_FL_PREFER"
    p = cfg(VLLM_FL_PLATFORM="cuda", VLLM_FL_PREFER="flagos", VLLM_FL_COMPILE_PREFER="vendor")
    assert (p.policy.prefer, p.policy.compile_prefer) == ("flagos", "vendor")


@pytest.mark.parametrize(
    "env, message",
    [
        ({"VLLM_FL_COMPILE_PREFER": "inductor"}, "VLLM_FL_COMPILE_PREFER='inductor': invalid"),
    ],
)
def test_invalid_compile_prefer_names_source_value_and_choices(env, message):
    with pytest.raises(ConfigError, match=message) as info:
        cfg(**env)
    assert "flagos, vendor, reference" in str(info.value)


def test_invalid_compile_prefer_in_file_names_file_and_key(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("compile_prefer: fastest\n")
    with pytest.raises(ConfigError, match=r"c.yaml:compile_prefer='fastest': invalid"):
        cfg(VLLM_FL_CONFIG=str(f))


def _act_manager(fail_eager=False):
    calls = []

    def flagos(self, x):
        calls.append("flagos")
        if fail_eager and not torch.compiler.is_compiling():
            raise RuntimeError("kernel failed")
        return x * 2

    def vendor(self, x):
        calls.append("vendor")
        return x * 5

    def reference(self, x):
        calls.append("reference")
        return x * 3

    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("act", "default.flagos", "flagos", flagos),
            OpImpl("act", "vendor.cuda", "vendor", vendor, vendor="cuda"),
            OpImpl("act", "reference.torch", "reference", reference),
        ]
    )
    m = OpManager(registry=reg)

    class Act(torch.nn.Module):
        forward_oot = dispatch_method("act", manager=m)

        def forward(self, x):
            return self.forward_oot(x)

    return m, Act, calls


SPLIT = SelectionPolicy.from_dict(prefer="flagos", compile_prefer="reference")


def test_traced_calls_use_compile_prefer_and_eager_calls_prefer():
    m, Act, calls = _act_manager()
    mod, x = Act(), torch.ones(3)
    with policy_context(SPLIT):
        m.resolve_all()
        torch._dynamo.reset()
        compiled = torch.compile(mod, fullgraph=True, backend="eager")
        assert compiled(x).tolist() == [3.0] * 3
        assert mod(x).tolist() == [2.0] * 3
        assert compiled(x).tolist() == [3.0] * 3
        assert m.used_impls() == {"act": "default.flagos"}
        assert m.used_impls(traced=True) == {"act": "reference.torch"}
    # without the split the trampoline has no branch, and both modes share one selection
    m.resolve_all()
    assert "_is_compiling" not in Act.forward_oot.__code__.co_names
    assert mod(x).tolist() == [2.0] * 3
    assert compiled(x).tolist() == [2.0] * 3
    assert m.used_impls(traced=True) == {"act": "default.flagos"}


def test_per_op_order_applies_in_both_modes():
    m, Act, _ = _act_manager()
    mod, x = Act(), torch.ones(3)
    policy = SPLIT.replace(per_op_order={"act": ["vendor"]})
    with policy_context(policy):
        m.resolve_all()
        torch._dynamo.reset()
        assert torch.compile(mod, fullgraph=True, backend="eager")(x).tolist() == [5.0] * 3
        assert mod(x).tolist() == [5.0] * 3


def test_eager_fallback_leaves_the_traced_selection_alone():
    m, Act, calls = _act_manager(fail_eager=True)
    mod, x = Act(), torch.ones(3)
    with policy_context(SPLIT):
        m.resolve_all()
        assert mod(x).tolist() == [5.0] * 3  # flagos failed, next in the flagos order: vendor
        assert m.used_impls() == {"act": "vendor.cuda"}
        assert m.used_impls(traced=True) == {"act": "reference.torch"}
        torch._dynamo.reset()
        assert torch.compile(mod, fullgraph=True, backend="eager")(x).tolist() == [3.0] * 3


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

"""Registration of the OOT classes: idempotent, filtered by the OOT policy, checked first."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("vllm")

import fake_oot  # noqa: E402
from vllm_fl import registration  # noqa: E402
from vllm_fl.dispatch.policy import current as dispatch_policy  # noqa: E402

OOT_ENV = (
    "VLLM_FL_PREFER_ENABLED",
    "VLLM_FL_OOT_ENABLED",
    "VLLM_FL_OOT_WHITELIST",
    "VLLM_FL_OOT_BLACKLIST",
    "VLLM_FL_CONFIG",
)


@pytest.fixture
def fresh(monkeypatch, clean_oot_registry):
    """Fake OOT classes, no OOT registration yet, the policy re-read from a clean environment."""
    for var in OOT_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(registration, "_oot_classes", lambda: dict(fake_oot.FAKE_OOT_CLASSES))
    for name in fake_oot.FAKE_OOT_CLASSES:
        clean_oot_registry.pop(name, None)
    registration._replaced.clear()
    registration._yielded.clear()
    registration._foreign_logged.clear()
    registration._logged = False

    def configure(**env):
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        dispatch_policy.reset_global_policy()

    configure()
    yield clean_oot_registry, configure
    monkeypatch.undo()
    registration._yielded.clear()
    registration._foreign_logged.clear()
    dispatch_policy.reset_global_policy()


def test_registers_every_class_once_and_is_idempotent(fresh, caplog):
    registry, _ = fresh
    caplog.set_level(logging.INFO, logger=registration.LOGGER_NAME)
    first = registration.register_oot_classes()
    assert first == fake_oot.FAKE_OOT_CLASSES
    assert registry["RMSNorm"] is fake_oot.RMSNormFake
    assert registry["SiluAndMul"] is fake_oot.SiluAndMulFake
    second = registration.register_oot_classes()  # vLLM calls the entry point again
    assert second == first
    assert registry["RMSNorm"] is fake_oot.RMSNormFake
    replaced_logs = [r for r in caplog.records if "replaced vLLM layers" in r.getMessage()]
    assert len(replaced_logs) == 1
    assert "RMSNorm -> RMSNormFake" in replaced_logs[0].getMessage()


def test_vllm_builds_our_class_once_registered(fresh, vllm_config):
    from vllm.model_executor.layers.layernorm import RMSNorm

    registration.register_oot_classes()
    layer = RMSNorm(64)
    assert type(layer) is fake_oot.RMSNormFake
    assert layer.weight.shape == (64,)


@pytest.mark.parametrize("entry", ["RMSNorm", "rmsnorm", "rms_norm", "RMS_NORM"])
def test_blacklist_matches_class_or_op_name(fresh, entry):
    registry, configure = fresh
    configure(VLLM_FL_OOT_BLACKLIST=entry)
    assert registration.register_oot_classes() == {"SiluAndMul": "fake_oot:SiluAndMulFake"}
    assert "RMSNorm" not in registry


def test_whitelist_registers_only_the_listed(fresh):
    registry, configure = fresh
    configure(VLLM_FL_OOT_WHITELIST="silu_and_mul")
    assert registration.register_oot_classes() == {"SiluAndMul": "fake_oot:SiluAndMulFake"}
    assert "RMSNorm" not in registry


@pytest.mark.parametrize("variable", ["VLLM_FL_OOT_WHITELIST", "VLLM_FL_OOT_BLACKLIST"])
def test_lists_match_the_manifest_op_where_vllm_registers_another_name(
    fresh, monkeypatch, variable
):
    """vLLM registers ReLUSquaredActivation as 'relu2'; an op of ops.yaml replacing it may be
    'relu_squared', the name `explain` shows, and the lists must take that name too."""
    import vllm_fl.ops

    registry, configure = fresh
    monkeypatch.setattr(vllm_fl.ops, "OOT_OPS", {"SiluAndMul": "swiglu_fl"})
    configure(**{variable: "SWIGLU_FL"})
    registered = registration.register_oot_classes()
    if variable == "VLLM_FL_OOT_WHITELIST":
        assert registered == {"SiluAndMul": "fake_oot:SiluAndMulFake"}
    else:
        assert registered == {"RMSNorm": "fake_oot:RMSNormFake"}


def test_config_file_oot_blacklist(fresh, tmp_path):
    registry, configure = fresh
    path = tmp_path / "fl.yaml"
    path.write_text("oot_blacklist: [SiluAndMul]\n")
    configure(VLLM_FL_CONFIG=str(path))
    assert registration.register_oot_classes() == {"RMSNorm": "fake_oot:RMSNormFake"}


def test_whitelist_and_blacklist_together_is_an_error(fresh):
    _, configure = fresh
    with pytest.raises(Exception, match="(?i)whitelist.*blacklist|blacklist.*whitelist"):
        configure(VLLM_FL_OOT_WHITELIST="RMSNorm", VLLM_FL_OOT_BLACKLIST="SiluAndMul")
        registration.register_oot_classes()


@pytest.mark.parametrize("env", [{"VLLM_FL_OOT_ENABLED": "0"}, {"VLLM_FL_PREFER_ENABLED": "false"}])
def test_switches_turn_registration_off(fresh, env, caplog):
    registry, configure = fresh
    configure(**env)
    caplog.set_level(logging.INFO, logger=registration.LOGGER_NAME)
    assert registration.register_oot_classes() == {}
    assert "RMSNorm" not in registry and "SiluAndMul" not in registry
    assert any("disabled" in r.getMessage() for r in caplog.records)


def _foreign_lines(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO and "another plugin" in r.getMessage()
    ]


def test_another_plugin_registering_first_keeps_its_class(fresh, caplog):
    registry, _ = fresh
    from vllm.model_executor.custom_op import CustomOp

    CustomOp.register_oot(_decorated_op_cls=fake_oot.SiluAndMulOther, name="SiluAndMul")
    caplog.set_level(logging.INFO, logger=registration.LOGGER_NAME)
    assert registration.register_oot_classes() == {"RMSNorm": "fake_oot:RMSNormFake"}
    assert registration.register_oot_classes() == {"RMSNorm": "fake_oot:RMSNormFake"}
    assert registry["SiluAndMul"] is fake_oot.SiluAndMulOther
    assert registry["RMSNorm"] is fake_oot.RMSNormFake
    lines = _foreign_lines(caplog)
    assert len(lines) == 1 and "SiluAndMul" in lines[0] and "SiluAndMulOther" in lines[0], lines


@pytest.mark.parametrize("form", ["keyword", "decorator", "class-decorator"])
def test_another_plugin_registering_after_us_takes_the_layer(fresh, caplog, form):
    registry, _ = fresh
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers.activation import SiluAndMul

    caplog.set_level(logging.INFO, logger=registration.LOGGER_NAME)
    registration.register_oot_classes()
    assert registry["SiluAndMul"] is fake_oot.SiluAndMulFake
    # No "AssertionError: Duplicate op name" from vLLM: ours steps aside.
    if form == "keyword":
        CustomOp.register_oot(_decorated_op_cls=fake_oot.SiluAndMulOther, name="SiluAndMul")
    elif form == "decorator":
        CustomOp.register_oot(name="SiluAndMul")(fake_oot.SiluAndMulOther)
    else:
        SiluAndMul.register_oot(fake_oot.SiluAndMulOther)
    assert registry["SiluAndMul"] is fake_oot.SiluAndMulOther
    assert registry["RMSNorm"] is fake_oot.RMSNormFake
    assert registration.register_oot_classes() == {"RMSNorm": "fake_oot:RMSNormFake"}
    assert registry["SiluAndMul"] is fake_oot.SiluAndMulOther
    lines = _foreign_lines(caplog)
    assert len(lines) == 1 and "SiluAndMul" in lines[0], lines


def test_registered_classes_keep_vllms_op_name(fresh):
    """vLLM's register_oot names the class 'RMSNorm'; ours answers to vLLM's 'rms_norm'."""
    registration.register_oot_classes()
    assert fake_oot.RMSNormFake.name == "rms_norm"
    assert fake_oot.SiluAndMulFake.name == "silu_and_mul"


@pytest.mark.parametrize(
    "target, message",
    [
        ("fake_oot:WithInit", "must not define __init__"),
        ("fake_oot:NoForwardOot", "must define forward_oot"),
        ("fake_oot:SiluAndMulFake", "must subclass RMSNorm"),
    ],
)
def test_classes_are_checked_before_registration(fresh, monkeypatch, target, message):
    registry, _ = fresh
    name = "SiluAndMul" if "NoForwardOot" in target else "RMSNorm"
    monkeypatch.setattr(registration, "_oot_classes", lambda: {name: target})
    with pytest.raises(TypeError, match=message):
        registration.register_oot_classes()
    assert name not in registry


@pytest.fixture
def with_subclasses(fresh, monkeypatch):
    """`fresh` plus the fake subclass entries (ops.yaml's `subclasses`)."""
    registry, configure = fresh
    subclasses = dict(fake_oot.FAKE_OOT_SUBCLASSES)
    monkeypatch.setattr(registration, "_subclasses", lambda: subclasses)
    monkeypatch.setattr(
        registration,
        "_oot_classes",
        lambda: {**fake_oot.FAKE_OOT_CLASSES, **{n: t for n, (_, t) in subclasses.items()}},
    )
    for name in subclasses:
        registry.pop(name, None)
    registration._absent.clear()
    registration._diverged.clear()
    yield registry, configure
    for name in subclasses:
        registry.pop(name, None)
    registration._absent.clear()
    registration._diverged.clear()


def test_a_subclass_that_computes_what_its_layer_computes_is_replaced_by_name(
    with_subclasses, vllm_config, caplog
):
    """vLLM looks classes up by exact name: ScaledRMSNorm gets its own generated class, which
    vLLM builds with ScaledRMSNorm's constructor, bound to forward_oot and named rms_norm."""
    registry, _ = with_subclasses
    caplog.set_level(logging.INFO, logger=registration.LOGGER_NAME)
    registered = registration.register_oot_classes()
    assert registered["ScaledRMSNorm"] == "fake_oot:ScaledRMSNormFake"
    assert registry["ScaledRMSNorm"] is fake_oot.ScaledRMSNormFake
    layer = fake_oot.ScaledRMSNorm(64, scale=3.0)
    assert type(layer) is fake_oot.ScaledRMSNormFake and layer.scale == 3.0
    assert fake_oot.ScaledRMSNormFake.name == "rms_norm"
    summary = [r.getMessage() for r in caplog.records if "replaced vLLM layers" in r.getMessage()]
    assert "ScaledRMSNorm -> ScaledRMSNormFake" in summary[0]


def test_a_subclass_this_vllm_lacks_is_left_out_and_named(with_subclasses, caplog):
    registry, _ = with_subclasses
    caplog.set_level(logging.INFO, logger=registration.LOGGER_NAME)
    registered = registration.register_oot_classes()
    assert "MissingRMSNorm" not in registered and "MissingRMSNorm" not in registry
    assert "RMSNorm" in registered  # the others are not held up
    summary = [r.getMessage() for r in caplog.records if "replaced vLLM layers" in r.getMessage()]
    assert "; not in this vLLM: MissingRMSNorm" in summary[0]
    assert "kept vLLM's" not in summary[0]


def test_a_subclass_with_its_own_forward_keeps_vllms_class(with_subclasses, caplog):
    """OwnMathsChild inherits a forward_native that OwnMathsRMSNorm (between it and RMSNorm)
    defines: its computation is not rms_norm's, so it is not routed, and a WARNING says why."""
    registry, _ = with_subclasses
    caplog.set_level(logging.INFO, logger=registration.LOGGER_NAME)
    assert "OwnMathsChild" not in registration.register_oot_classes()
    assert "OwnMathsChild" not in registry
    registration.register_oot_classes()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "OwnMathsChild" in warnings[0] and "OwnMathsRMSNorm.forward_native" in warnings[0]


@pytest.mark.parametrize("entry", ["RMSNorm", "rms_norm", "ScaledRMSNorm"])
def test_blacklisting_a_layer_keeps_vllms_subclasses_too(with_subclasses, entry):
    registry, configure = with_subclasses
    configure(VLLM_FL_OOT_BLACKLIST=entry)
    registered = registration.register_oot_classes()
    assert "ScaledRMSNorm" not in registered and "ScaledRMSNorm" not in registry
    assert ("RMSNorm" in registered) == (entry == "ScaledRMSNorm")


def test_every_listed_subclass_of_this_vllm_computes_what_its_layer_computes():
    """Each subclass ops.yaml lists either is absent from the installed vLLM (a class of another
    version) or subclasses its layer without a forward_* of its own; this vLLM has the RoPE
    scalings of real checkpoints."""
    from vllm_fl.ops import OOT_CLASSES, OOT_SUBCLASSES

    present = set()
    for name, (layer_name, target) in OOT_SUBCLASSES.items():
        assert layer_name in OOT_CLASSES
        try:
            cls = registration._load_class(target)
        except ImportError as exc:  # the vLLM module or class is missing, nothing else
            assert "vllm." in str(exc) or name in str(exc), exc
            continue
        present.add(name)
        base = registration._in_tree_base(cls, name)
        assert base.__module__.startswith("vllm."), base
        assert registration.own_forward(base, layer_name) == "", name
    assert {"Llama3RotaryEmbedding", "YaRNScalingRotaryEmbedding"} <= present


def _load_generated(short_module: str, monkeypatch):
    """A fresh copy of the generated module ``vllm_fl/ops/<short_module>.py``, imported under a
    name of its own against vLLM as it is now (the package's own module keeps its classes)."""
    import importlib.util
    import sys
    from pathlib import Path

    import vllm_fl.ops

    name = f"_generated_{short_module}_copy"
    path = Path(vllm_fl.ops.__file__).parent / f"{short_module}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return name, module


def test_a_layer_this_vllm_lacks_or_has_as_no_custom_op_is_left_out_and_named(
    fresh, monkeypatch, caplog
):
    """ops.yaml's `layer_optional` against a vLLM shaped like 0.24: no GELUTanh, LayerNorm a
    plain nn.Module. The generated modules still import and define every other class; GELUTanh
    gets no class, LayerNorm's is not registered (vLLM never swaps a plain module); both are
    named in the summary and the other layers are replaced."""
    import torch
    from vllm.model_executor.layers import activation, layernorm

    class LayerNorm(torch.nn.Module):  # vLLM 0.24's
        def __init__(self, dim: int, eps: float = 1e-6):
            super().__init__()
            self.dim, self.eps = dim, eps

    monkeypatch.delattr(activation, "GELUTanh")
    monkeypatch.setattr(layernorm, "LayerNorm", LayerNorm)
    acts, act_module = _load_generated("activation", monkeypatch)
    norms, norm_module = _load_generated("layernorm", monkeypatch)
    assert not hasattr(act_module, "GELUTanhFL")
    assert "GELUTanhFL" not in act_module.__all__
    assert issubclass(act_module.GELUFL, activation.GELU)
    assert issubclass(norm_module.LayerNormFL, LayerNorm)
    targets = {
        "GELU": f"{acts}:GELUFL",
        "GELUTanh": f"{acts}:GELUTanhFL",
        "LayerNorm": f"{norms}:LayerNormFL",
        "RMSNormGated": f"{norms}:RMSNormGatedFL",
    }
    monkeypatch.setattr(registration, "_oot_classes", lambda: dict(targets))
    monkeypatch.setattr(registration, "_absent", {})
    caplog.set_level(logging.INFO, logger=registration.LOGGER_NAME)
    registry, _ = fresh
    for name in targets:
        registry.pop(name, None)

    registered = registration.register_oot_classes()

    assert set(registered) == {"GELU", "RMSNormGated"}
    assert registry["GELU"] is act_module.GELUFL
    assert "GELUTanh" not in registry and "LayerNorm" not in registry
    assert registration._absent["GELUTanh"].startswith("AttributeError")
    assert registration._absent["LayerNorm"].endswith("LayerNorm is no CustomOp")
    summary = [r.getMessage() for r in caplog.records if "replaced vLLM layers" in r.getMessage()]
    assert summary[0].endswith("; not in this vLLM: GELUTanh, LayerNorm"), summary

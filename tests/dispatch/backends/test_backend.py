"""The backend object: implementations registered for it belong to it, and its hooks are called
explicitly (prepare before availability, warm-up looked up by op, selection listeners)."""

from vllm_fl.dispatch import OpImpl, OpManager, OpRegistry
from vllm_fl.backends import flaggems
from vllm_fl.dispatch import builtin
from vllm_fl.dispatch.backend import Backend


def fn(x):
    return x


def test_registrations_belong_to_the_backend_they_were_made_for():
    reg = OpRegistry()
    backend = Backend("fake")
    with reg.registering_for(backend):
        reg.register_impl(OpImpl("op", "default.fake", "flagos", fn))
    reg.register_impl(OpImpl("op", "reference.torch", "reference", fn))  # a plugin's, say
    flagos, reference = reg.get_implementations("op")
    assert reg.backend_of(flagos) is backend and reg.backend_of(reference) is None
    assert flagos.available is None  # a backend without prepare leaves the check alone
    assert reg.backends() == [backend]
    reg.unregister("op", "default.fake")
    assert reg.backends() == []


def test_prepare_runs_once_before_the_first_availability_check():
    events = []
    backend = Backend("fake", prepare=lambda: events.append("prepare"))

    def available():
        events.append("available")
        return True

    reg = OpRegistry()
    with reg.registering_for(backend):
        reg.register_many(
            [
                OpImpl("a", "default.fake", "flagos", fn, available=available),
                OpImpl("b", "default.fake", "flagos", fn, available=available),
            ]
        )
    reg.get_impl("b", "default.fake").available()  # as the parity tests ask, no manager
    assert events == ["prepare", "available"]
    m = OpManager(reg)
    assert m.resolve("a") is fn and m.resolve("b") is fn  # each asks its check again
    assert events == ["prepare", "available", "available", "available"]  # prepare ran once


def test_a_failing_prepare_makes_the_backend_unavailable_and_says_why():
    def prepare():
        raise ImportError("no vLLM library")

    reg = OpRegistry()
    with reg.registering_for(Backend("fake", prepare=prepare)):
        reg.register_impl(OpImpl("op", "default.fake", "flagos", fn))
    reg.register_impl(OpImpl("op", "reference.torch", "reference", lambda x: -x))
    _, rejected = OpManager(reg).evaluate("op")
    ((impl, why),) = rejected
    assert impl.impl_id == "default.fake"
    assert "backend 'fake' prepare() raised ImportError: no vLLM library" in why


def test_warm_up_hooks_are_declared_per_op():
    hook = lambda *args: 0  # noqa: E731
    backend = Backend("fake", warm_up={"fused_experts": hook})
    assert backend.warm_up_hook("fused_experts") is hook
    assert backend.warm_up_hook("rms_norm") is None


def test_builtin_backends_register_for_the_backend_their_package_declares():
    reg = OpRegistry()
    done = builtin.register_builtins(reg, packages=("vllm_fl.backends.flaggems",))
    assert done == ["vllm_fl.backends.flaggems"]
    impls = [i for op in reg.list_operators() for i in reg.get_implementations(op)]
    assert impls and {reg.backend_of(i) for i in impls} == {flaggems.BACKEND}
    assert flaggems.BACKEND.warm_up_hook("fused_experts") is flaggems.warm_up_experts


def test_a_package_without_backend_gets_one_without_hooks():
    backend = builtin.builtin_backend("vllm_fl.backends.reference")
    assert backend.name == "reference" and backend.prepare is None
    assert not backend.warm_up and not backend.selection_listeners

"""Launch plans of the kernel library: the first call per layout goes through FlagGems' entry,
later calls launch the compiled kernel with every parameter in signature order.

The compiled kernel is a recording stand-in (no GPU here); the kernel signature is a real
``triton.jit`` function. The GPU parity tests run every backend twice per layout on the real one.
"""

import pytest

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from recorded_plans import recorded_plans  # noqa: E402
from vllm_fl.kernels import launch  # noqa: E402


@triton.jit
def _kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr = True):
    pass


@pytest.fixture
def plans():
    return recorded_plans(_kernel, {"EVEN": False})


def test_first_call_per_layout_goes_through_the_entry(plans):
    plans, compiled, first = plans
    plans.launch("layout-a", (4,), ("x", "out", 7), {"BLOCK": 128})
    assert len(first) == 1 and compiled.launches == []
    plans.launch("layout-a", (5,), ("x2", "out2", 7), {"BLOCK": 128})
    assert len(first) == 1
    # constexprs after the positional arguments: given ones, then the entry's values
    assert compiled.launches == [((5, 1, 1), ("x2", "out2", 7, 128, False))]
    plans.launch("layout-b", (4,), ("x", "out", 9), {"BLOCK": 64})
    assert len(first) == 2


def test_grid_function_sees_the_constexprs(plans):
    plans, compiled, _ = plans
    grid = lambda meta: (3, 2 if meta["EVEN"] else 5)  # noqa: E731
    plans.launch("k", grid, ("x", "out", 7), {"BLOCK": 128})
    plans.launch("k", grid, ("x", "out", 7), {"BLOCK": 128})
    assert compiled.launches[0][0] == (3, 5, 1)


def test_plan_count_is_bounded(plans, monkeypatch):
    plans, _, first = plans
    monkeypatch.setattr(launch, "MAX_PLANS", 3)
    for layout in range(5):
        plans.launch(layout, (1,), ("x", "out", 7), {"BLOCK": 128})
    assert len(plans._plans) <= 3
    plans.launch(0, (1,), ("x", "out", 7), {"BLOCK": 128})
    assert len(first) == 6  # forgotten when the table started over


def test_missing_parameter_makes_no_plan(plans):
    plans, compiled, first = plans
    for _ in range(2):
        plans.launch("k", (1,), ("x", "out", 7), {})  # BLOCK given nowhere
    assert len(first) == 2 and compiled.launches == []


def test_aligned():
    import torch

    base = torch.zeros(64, dtype=torch.uint8)
    assert launch.aligned(base)
    assert not launch.aligned(base, base[1:])


def test_pointers_are_the_data_pointers_of_aligned_tensors_on_one_device():
    import torch

    base = torch.zeros(64, dtype=torch.uint8)
    assert launch.pointers(base, base[16:]) == [base.data_ptr(), base.data_ptr() + 16]
    assert launch.pointers(base, base[1:]) is None

    class OnGpu:  # a tensor on GPU 0 as pointers() reads it: aligned, another device
        def data_ptr(self) -> int:
            return base.data_ptr()

        def get_device(self) -> int:
            return 0

    assert launch.pointers(base, OnGpu()) is None
    assert launch.pointers(OnGpu(), base) is None


def test_on_current_gpu_compares_a_cuda_tensors_device_with_the_current_one(monkeypatch):
    import torch

    class CudaTensor:  # what on_current_gpu reads of a tensor on GPU 1
        is_cuda = True

        def get_device(self) -> int:
            return 1

    assert not launch.on_current_gpu(torch.zeros(1))  # a CPU tensor: no device query at all
    monkeypatch.setattr(launch, "_current_cuda_device", lambda: 1)
    assert launch.on_current_gpu(CudaTensor())
    monkeypatch.setattr(launch, "_current_cuda_device", lambda: 0)
    assert not launch.on_current_gpu(CudaTensor())


def test_the_module_defining_a_flag_gems_function_top_level_or_below(monkeypatch):
    """FlagGems' vendor overrides live in other modules than the generic function: the kernels
    are looked up where the function FlagGems exports is defined."""
    import sys
    import types

    defining = types.ModuleType("flag_gems.runtime.backend._vendor.fused_moe")
    defining.fused_moe_kernel = object()
    defining.rms_norm_kernel = object()

    def function():
        pass

    function.__module__ = defining.__name__
    top, fused = types.ModuleType("flag_gems"), types.ModuleType("flag_gems.fused")
    top.rms_norm = fused.fused_experts_impl = function
    top.fused = fused
    for module in (top, fused, defining):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    assert launch.defining_module("fused.fused_experts_impl") is defining
    assert launch.kernel_of("rms_norm", "rms_norm_kernel") is defining.rms_norm_kernel
    assert (
        launch.kernel_of("fused.fused_experts_impl", "fused_moe_kernel")
        is defining.fused_moe_kernel
    )
    assert launch.kernel_of("rms_norm", "no_such_kernel") is None
    assert launch.defining_module("fused.no_such_function") is None


def test_a_bound_launch_takes_new_leading_arguments_and_keeps_the_rest(plans):
    plans, compiled, first = plans
    planned = launch.Launch((4,), ("x", "out", 7), {"BLOCK": 128}, "layout")
    assert not plans.launch_bound("sig", ("x", "out"))  # nothing bound yet
    plans.run(planned, "sig", dynamic=2)  # through the entry, which makes the plan
    assert len(first) == 1 and compiled.launches == []
    assert plans.launch_bound("sig", ("x2", "out2"))
    assert compiled.launches == [((4, 1, 1), ("x2", "out2", 7, 128, False))]
    assert not plans.launch_bound("other", ("x2", "out2")) and len(first) == 1


def test_a_grid_function_is_never_bound(plans):
    plans, compiled, _ = plans
    grid = lambda meta: (3,)  # noqa: E731
    plans.run(launch.Launch(grid, ("x", "out", 7), {"BLOCK": 128}, "k"), "sig", dynamic=2)
    assert not plans.launch_bound("sig", ("x", "out"))


def test_a_kernel_without_a_plan_is_never_bound(plans):
    plans, _, _ = plans
    plans._plannable = False  # e.g. autotune pre-hooks: always through FlagGems' entry
    plans.run(launch.Launch((4,), ("x", "out", 7), {"BLOCK": 128}, "k"), "sig", dynamic=2)
    assert not plans.launch_bound("sig", ("x", "out"))


class _CLauncher:
    """Stand-in for Triton 3.6's compiled C ``launch``: records its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, *args) -> None:
        self.calls.append(args)


class _CudaLauncher:
    def __init__(self, global_scratch: int = 0) -> None:
        self.launch = _CLauncher()
        self.global_scratch_size = global_scratch
        self.profile_scratch_size = 0
        self.launch_cooperative_grid = False
        self.launch_pdl = True


class _Compiled:
    """A compiled kernel as Triton 3.6 has it: ``run`` (its launcher), ``function``,
    ``packed_metadata``, and the runner ``compiled[grid]``, which records."""

    function = 0xF00
    packed_metadata = (4, 1, 0)

    def __init__(self, launcher: _CudaLauncher) -> None:
        self.run = launcher
        self.runner_launches: list[tuple] = []

    def __getitem__(self, grid):
        return lambda *args: self.runner_launches.append((grid, args))


@pytest.fixture
def triton_36(monkeypatch):
    """Triton 3.6's calling convention, current device 0 with raw stream 0xABC."""
    import torch

    monkeypatch.setattr(launch, "_triton_version", lambda: (3, 6))
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda d: 0xABC + d, raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def test_the_c_launcher_is_called_as_tritons_runner_calls_it(triton_36):
    compiled = _Compiled(_CudaLauncher())
    launch.launcher_of(compiled)((2, 3, 1), "x", "out", 7)
    assert compiled.runner_launches == []
    # grid, stream, function, cooperative, pdl, no scratch, metadata, no launch metadata or hooks
    expected = (2, 3, 1, 0xABC, 0xF00, False, True, None, None, (4, 1, 0), None, None, None)
    assert compiled.run.launch.calls == [(*expected, "x", "out", 7)]


def test_a_registered_launch_hook_gets_tritons_runner(triton_36):
    from triton import knobs

    hook = knobs.runtime.launch_enter_hook
    if not hasattr(hook, "add"):
        pytest.skip("this Triton's launch hooks are not hook chains")
    compiled = _Compiled(_CudaLauncher())
    run = launch.launcher_of(compiled)
    profiler = lambda metadata: None  # noqa: E731
    hook.add(profiler)
    try:
        run((1, 1, 1), "x")
    finally:
        hook.remove(profiler)
    run((1, 1, 1), "y")
    assert compiled.runner_launches == [((1, 1, 1), ("x",))]
    assert [call[-1] for call in compiled.run.launch.calls] == ["y"]


def test_kernels_needing_scratch_or_wrapped_launchers_go_through_the_runner(triton_36):
    scratch = _Compiled(_CudaLauncher(global_scratch=256))
    wrapped = _Compiled(_CudaLauncher())
    wrapped.run.launch = lambda *args: pytest.fail("a wrapped launcher is called directly")
    for compiled in (scratch, wrapped):
        launch.launcher_of(compiled)((1, 1, 1), "x")
        assert compiled.runner_launches == [((1, 1, 1), ("x",))]


def test_other_triton_releases_use_the_runner(triton_36, monkeypatch):
    monkeypatch.setattr(launch, "_triton_version", lambda: (3, 5))
    compiled = _Compiled(_CudaLauncher())
    launch.launcher_of(compiled)((1, 1, 1), "x")
    assert compiled.runner_launches == [((1, 1, 1), ("x",))]
    assert compiled.run.launch.calls == []


def test_a_bound_launch_calls_the_c_launcher_with_its_grid(triton_36):
    plans, _, first = recorded_plans(_kernel, {"EVEN": False})
    compiled = _Compiled(_CudaLauncher())
    plans._first_launch = lambda grid, args, kwargs: (first.append(grid) or compiled, {})
    plans.run(launch.Launch((4,), ("x", "out", 7), {"BLOCK": 128}, "k"), "sig", dynamic=2)
    assert plans.launch_bound("sig", ("x2", "out2"))
    (call,) = compiled.run.launch.calls
    assert call[:3] == (4, 1, 1) and call[13:] == ("x2", "out2", 7, 128, True)

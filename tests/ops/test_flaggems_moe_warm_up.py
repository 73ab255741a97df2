"""Kernel variants of the FlagGems MoE path are compiled before serving, not by a served step.

Triton compiles a kernel variant the first time a call needs it (about half a second for the
experts GEMM on an H100). Which variant a ``fused_experts`` call needs depends on its token
count: FlagGems' tuned config for that count, Triton's integer classes, the alignment's path.
These tests pin down the pieces that keep the set of variants bounded and compiled up front:
``experts.warm_up_token_counts`` (one token count per distinct specialisation), the staged
alignment's launches (no constexpr depends on the token count), ``vllm_fl.moe.warm_up`` (one
backend call per distinct MoE layer setup) and the GPU worker calling it. No GPU here: the
alignment stages are recording stand-ins and the config a stand-in table; the GPU tests run the
real kernels (``tests/ops/test_flagos_own_launches_on_gpu.py``).
"""

from __future__ import annotations

import logging
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from vllm_fl.dispatch.backends.flaggems import experts, moe_launch

ALIGN_MAX_PAIRS = 128


def _kernels(config_by_tokens) -> experts.ExpertKernels:
    """Expert kernels whose tuned config per token count is ``config_by_tokens(m)``."""

    def config(w1, w2, top_k, dtype, m):
        tuned = config_by_tokens(m)
        return tuned, tuple(sorted(tuned.items()))

    return experts.ExpertKernels(gemm=None, gemm_params=experts.GEMM_RUNTIME_PARAMS, config=config)


def _two_configs(m: int) -> dict:
    return {"BLOCK_SIZE_M": 16 if m <= 64 else 64, "BLOCK_SIZE_N": 64}


W1 = torch.empty(128, 64, 32)
W2 = torch.empty(128, 32, 32)


def _counts(max_tokens: int, top_k: int = 8, config=_two_configs) -> list[int]:
    return experts.warm_up_token_counts(
        _kernels(config), W1, W2, top_k, max_tokens, 128, ALIGN_MAX_PAIRS
    )


def _class(m: int, top_k: int = 8, config=_two_configs) -> tuple:
    return experts.specialisation(_kernels(config), W1, W2, top_k, m, 128, ALIGN_MAX_PAIRS)


def test_every_token_count_shares_its_specialisation_with_a_smaller_or_equal_warm_up_count():
    counts = _counts(3000)
    warmed = {_class(m): m for m in counts}
    assert len(warmed) == len(counts)  # one count per specialisation
    for m in range(1, 3001):
        assert warmed[_class(m)] <= m


def test_the_warm_up_counts_are_few_and_follow_the_config_and_integer_classes():
    counts = _counts(3000)
    assert counts == sorted(counts) and counts[0] == 1
    assert len(counts) < 60
    # the config changes after 64 tokens: the first count past it starts a class
    assert 65 in counts
    # 33 to 64 tokens share the config and the alignment bucket; Triton still compiles apart
    # an even count (pairs % 16 == 0 with top-8) and a multiple of 16 tokens (the top-k sum)
    assert {33, 34, 48} <= set(counts)
    assert not {35, 36, 49, 64} & set(counts)


def test_the_specialisation_separates_the_alignment_paths():
    # top-8 of 128 experts: 4 tokens are sparse (32 pairs * 4 <= 128), 5 to 16 run the
    # one-program alignment (up to 128 pairs), more the stages by pairs per expert
    assert _class(4)[1] == ("sparse",)
    assert _class(5)[1] == ("one program", 40)
    assert _class(16)[1] == ("one program", 128)
    assert _class(17)[1] == ("stages", 2)
    assert _class(32)[1] == ("stages", 2)
    assert _class(33)[1] == ("stages", 4)


def test_the_warm_up_counts_stop_at_max_tokens_and_at_one_chunk():
    assert max(_counts(100)) <= 100
    assert _counts(100) == [m for m in _counts(3000) if m <= 100]
    assert max(_counts(10 * experts.CHUNK_SIZE, config=lambda m: {"BLOCK_SIZE_M": 64})) <= (
        experts.CHUNK_SIZE
    )


def test_a_config_per_token_count_gives_a_warm_up_count_per_token_count():
    assert _counts(40, config=lambda m: {"BLOCK_SIZE_M": 16, "tag": m}) == list(range(1, 41))


class _Stage:
    """A stand-in stage of FlagGems' alignment: records (layout, grid, args)."""

    def __init__(self) -> None:
        self.launches: list[tuple] = []

    def launch(self, layout, grid, args, kwargs) -> None:
        self.launches.append((layout, grid, args))


def _fill_like_the_prepare_kernel(pairs, sorted_ids, expert_ids, scratch):
    sorted_ids.fill_(pairs)
    expert_ids.zero_()
    scratch.zero_()


def _align(stages, pairs: int, experts_n: int = 128, block: int = 16):
    topk_ids = torch.randint(0, experts_n, (pairs,), dtype=torch.int32)
    padded = pairs + experts_n * (block - 1)
    sorted_ids = torch.full((padded,), -7, dtype=torch.int32)
    expert_ids = torch.full((-(-padded // block),), -7, dtype=torch.int32)
    total = torch.empty(1, dtype=torch.int32)
    moe_launch.align_in_stages(stages, topk_ids, experts_n, block, sorted_ids, expert_ids, total)
    return sorted_ids, expert_ids


@pytest.fixture
def stages(monkeypatch):
    """Stand-in stages; the buffers prepared by torch as ``align_prepare_kernel`` does (that
    kernel's own test runs it in Triton's interpreter)."""
    prepared = []

    def prepare(pairs, sorted_ids, expert_ids, scratch):
        prepared.append(pairs)
        _fill_like_the_prepare_kernel(pairs, sorted_ids, expert_ids, scratch)

    monkeypatch.setattr(moe_launch, "prepare_buffers", prepare)
    return {name: _Stage() for name in moe_launch._ALIGN_STAGES}, prepared


def test_the_staged_alignment_prepares_the_buffers_and_passes_no_length_as_a_constexpr(stages):
    stages, prepared = stages
    sorted_ids, expert_ids = _align(stages, 1000)
    assert prepared == [1000]
    assert (sorted_ids == 1000).all()  # the padding value: the pair count
    assert (expert_ids == 0).all()
    ((_, _, args),) = stages["stage1"].launches
    # FlagGems' stage 1 signature: ... numel_sorted_token_ids, numel_expert_ids (constexprs),
    # then its two fill tiles
    assert args[7:9] == (0, 0)
    assert args[3] == 1000  # numel: a runtime argument
    assert (args[1] == 0).all()  # the counters FlagGems zeroes


def test_token_counts_of_one_pairs_per_expert_bucket_share_the_staged_alignment_layout(stages):
    stages, _prepared = stages
    for pairs in (1000, 1008, 1024):  # ceil(pairs / 128) rounds up to 8 for each
        _align(stages, pairs)
    layouts = {layout for layout, _grid, _args in stages["stage1"].launches}
    # 1000 is not a multiple of 16, 1008 and 1024 are: two layouts, not three
    assert len(layouts) == 2
    _align(stages, 1025)  # 9 pairs per expert, rounded up to 16: another variant
    assert len({layout for layout, _grid, _args in stages["stage1"].launches}) == 3


# -- vllm_fl.moe.warm_up ----------------------------------------------------------------------

vllm = pytest.importorskip("vllm")


@pytest.fixture
def backend(monkeypatch):
    """A backend declaring a ``fused_experts`` warm-up (``package.warm_up_experts``) whose impl
    of fused_experts is selected; its calls are recorded."""
    from vllm_fl.dispatch.backends.backend import Backend

    package = types.ModuleType("fake_moe_backend")
    calls = []

    def warm_up_experts(w1, w2, top_k, max_tokens, on_input, global_experts):
        calls.append((tuple(w1.shape), top_k, max_tokens, on_input, global_experts))
        return 3

    package.warm_up_experts = warm_up_experts
    monkeypatch.setitem(sys.modules, "fake_moe_backend", package)

    def impl(*args):
        return None

    selected = SimpleNamespace(fn=impl, impl_id="default.fake")

    def backend_of(impl):
        hook = getattr(package, "warm_up_experts", None)
        return Backend("fake", warm_up={"fused_experts": hook} if hook else {})

    manager = SimpleNamespace(
        resolve_candidates=lambda op: [selected] if op else [],
        registry=SimpleNamespace(backend_of=backend_of),
    )
    import vllm_fl.dispatch

    monkeypatch.setattr(vllm_fl.dispatch, "get_default_manager", lambda: manager)
    return package, calls


def _layer(experts_n=8, top_k=2, expert_map=None, on_input=False, hidden=16):
    from vllm_fl.moe import UnquantizedFusedMoEMethodFL

    method = object.__new__(UnquantizedFusedMoEMethodFL)  # its __init__ needs vLLM's config
    torch.nn.Module.__init__(method)  # vLLM's CustomOp is a module
    method.moe = SimpleNamespace(experts_per_token=top_k)
    layer = torch.nn.Module()
    layer.quant_method = method
    layer.w13_weight = torch.nn.Parameter(torch.zeros(experts_n, 2 * hidden, hidden))
    layer.w2_weight = torch.nn.Parameter(torch.zeros(experts_n, hidden, hidden))
    layer.expert_map = expert_map
    layer.apply_router_weight_on_input = on_input
    layer.global_num_experts = experts_n
    return layer


def _model(*layers) -> torch.nn.Module:
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList(layers)
    model.other = torch.nn.Linear(2, 2)
    return model


def test_warm_up_calls_the_backend_once_per_distinct_layer_setup(backend):
    from vllm_fl import moe

    _package, calls = backend
    model = _model(_layer(), _layer(), _layer(top_k=4), _layer(on_input=True))
    assert moe.warm_up(model, 2048) == 3 * 3
    assert calls == [
        ((8, 32, 16), 2, 2048, False, 8),
        ((8, 32, 16), 4, 2048, False, 8),
        ((8, 32, 16), 2, 2048, True, 8),
    ]


def test_warm_up_leaves_expert_parallel_layers_and_other_modules_alone(backend):
    from vllm_fl import moe

    _package, calls = backend
    model = _model(_layer(expert_map=torch.arange(8)))
    assert moe.warm_up(model, 2048) == 0
    assert calls == []


def test_warm_up_does_nothing_where_the_backend_has_no_warm_up(backend):
    from vllm_fl import moe

    package, calls = backend
    del package.warm_up_experts
    assert moe.warm_up(_model(_layer()), 2048) == 0


def test_the_gpu_worker_warms_the_moe_layers_up_after_vllms_own_warm_up(monkeypatch):
    from vllm.v1.worker.gpu_worker import Worker

    from vllm_fl import moe
    from vllm_fl.worker import WorkerFL

    events = []
    monkeypatch.setattr(
        Worker, "compile_or_warm_up_model", lambda self: events.append("vllm") or "times"
    )
    monkeypatch.setattr(Worker, "get_model", lambda self: "model")
    monkeypatch.setattr(moe, "warm_up", lambda model, tokens: events.append((model, tokens)))
    worker = object.__new__(WorkerFL)
    worker.scheduler_config = SimpleNamespace(max_num_batched_tokens=4096)
    assert worker.compile_or_warm_up_model() == "times"
    assert events == ["vllm", ("model", 4096)]


def test_a_model_without_moe_layers_resolves_nothing(monkeypatch):
    import vllm_fl.dispatch
    from vllm_fl import moe

    def no_manager():
        raise AssertionError("resolved an op for a model without MoE layers")

    monkeypatch.setattr(vllm_fl.dispatch, "get_default_manager", no_manager)
    assert moe.warm_up(_model(), 2048) == 0


def test_no_runnable_fused_experts_means_no_warm_up(monkeypatch):
    import vllm_fl.dispatch
    from vllm_fl import moe
    from vllm_fl.dispatch import DispatchError

    def resolve(op):
        raise DispatchError("Op 'fused_experts': no implementation can run")

    manager = SimpleNamespace(resolve_candidates=resolve)
    monkeypatch.setattr(vllm_fl.dispatch, "get_default_manager", lambda: manager)
    assert moe.warm_up(_model(_layer()), 2048) == 0


def test_a_failing_warm_up_is_a_warning_and_the_engine_goes_on(backend, caplog):
    from vllm_fl import moe

    package, calls = backend
    done = package.warm_up_experts

    def fails_on_the_second_setup(w1, w2, top_k, *rest):
        if top_k == 4:
            raise RuntimeError("out of resources")
        return done(w1, w2, top_k, *rest)

    package.warm_up_experts = fails_on_the_second_setup
    with caplog.at_level("WARNING", logger="vllm_fl.vllm"):
        assert moe.warm_up(_model(_layer(), _layer(top_k=4)), 2048) == 3
    assert len(calls) == 1
    assert (
        "the MoE warm-up of default.fake failed after 3 calls (RuntimeError: out of resources)"
        in (caplog.text)
    )


def test_vllm_fl_moe_warmup_off_skips_the_warm_up(backend, monkeypatch):
    import vllm_fl.dispatch
    from vllm_fl import moe

    _package, calls = backend
    monkeypatch.setattr(vllm_fl.dispatch, "get_config", lambda: SimpleNamespace(moe_warm_up=False))
    assert moe.warm_up(_model(_layer()), 2048) == 0
    assert calls == []


def test_flag_gems_logs_errors_only_within_quiet_flag_gems_and_as_before_after(caplog):
    gems_logger = logging.getLogger("flag_gems")
    gems_logger.setLevel(logging.INFO)
    try:
        with caplog.at_level(logging.INFO, logger="flag_gems"):
            with experts.quiet_flag_gems():
                gems_logger.warning("no table")
                gems_logger.error("broken")
            gems_logger.info("after")
        assert [record.getMessage() for record in caplog.records] == ["broken", "after"]
        assert gems_logger.level == logging.INFO
    finally:
        gems_logger.setLevel(logging.NOTSET)

"""The engine runner's workload: checked, carried to the subprocess intact, its prompts fixed."""

from __future__ import annotations

import os

import pytest
from vllm_fl.testing import engine
from vllm_fl.testing.engine import Workload
from vllm_fl.testing.launch import vllm_available


def test_a_workload_survives_the_command_line():
    w = Workload(mode="compile", max_tokens=3, prompt_len=5, decode_prompt_len=2, llm_args={"a": 1})
    flag, text = w.argv()
    assert flag == "--workload" and Workload.from_json(text) == w


def test_bad_workloads_are_refused():
    with pytest.raises(ValueError, match="mode is 'fast'; allowed: eager, compile"):
        Workload(mode="fast")
    with pytest.raises(ValueError, match="decode_prompt_len needs token-id prompts"):
        Workload(decode_prompt_len=4)
    with pytest.raises(ValueError, match="timed_repeats is 0; allowed: 1 or more"):
        Workload(timed_repeats=0)


def test_prompts_are_text_or_seeded_token_ids():
    assert engine.prompts(Workload(num_prompts=5))[4] == engine.TEXT_PROMPTS[0]
    batch = engine.prompts(Workload(num_prompts=3, prompt_len=7))
    assert batch == engine.prompts(Workload(num_prompts=3, prompt_len=7))
    low, high = engine.PROMPT_TOKEN_RANGE
    assert [len(p["prompt_token_ids"]) for p in batch] == [7, 7, 7]
    assert all(low <= t < high for p in batch for t in p["prompt_token_ids"])
    assert batch[0] != batch[1]


def test_the_tests_small_model_settings_are_the_default():
    w = Workload()
    assert w.llm_args == engine.SMALL_MODEL_ARGS and w.detokenize
    assert Workload(llm_args={"skip_tokenizer_init": True}).detokenize is False


def test_each_timed_repeat_has_prompts_of_its_own():
    w = Workload(num_prompts=3, prompt_len=7, timed_repeats=2)
    first, second = engine.prompts(w, 0), engine.prompts(w, 1)
    assert first == engine.prompts(w) and not set(map(str, first)) & set(map(str, second))


class _ClockedLLM:
    """Generates each batch in the given number of (fake) seconds, echoing its prompts."""

    def __init__(self, seconds, monkeypatch):
        self.seconds, self.clock = iter(seconds), [0.0]
        monkeypatch.setattr(engine.time, "perf_counter", lambda: self.clock[0])

    def generate(self, batch, params, use_tqdm):
        self.clock[0] += next(self.seconds)
        return list(batch)


def test_the_first_batch_is_returned_and_every_batch_timed(monkeypatch):
    llm = _ClockedLLM([3.0, 1.0, 2.0], monkeypatch)
    outputs, times = engine._timed_generate(llm, [["a"], ["b"], ["c"]], params=None)
    assert outputs == ["a"] and times == [3.0, 1.0, 2.0]


class _RecordingLLM:
    """Records the prompt lengths of every batch it generates; each prompt gives one token."""

    def __init__(self):
        import types

        self.batches: list[list[int]] = []
        self.llm_engine = types.SimpleNamespace(vllm_config=None)

    def generate(self, batch, params, use_tqdm):
        import types

        self.batches.append([len(p["prompt_token_ids"]) for p in batch])
        return [
            types.SimpleNamespace(
                outputs=[types.SimpleNamespace(token_ids=[7])],
                prompt_token_ids=p["prompt_token_ids"],
            )
            for p in batch
        ]


def test_a_resident_engine_warms_up_both_kinds_of_batch_before_it_is_ready(monkeypatch, tmp_path):
    import sys
    import types

    llm = _RecordingLLM()
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setattr(engine, "build_llm", lambda *args: llm)
    monkeypatch.setattr(engine, "sampling_params", lambda *args: None)
    monkeypatch.setattr(engine, "engine_settings", lambda config: {})
    # the dispatch's record reads vLLM's registry, which the stand-in vllm has not (where
    # another test loaded the dispatch)
    monkeypatch.setattr(engine, "_dispatch_record", lambda mode: {})
    work = Workload(num_prompts=3, prompt_len=40, decode_prompt_len=16, max_tokens=1)
    engine.serve("model", work, ["batch 0", "quit"], tmp_path / "result")
    # warm-up: the full prompts, then the same cut to the decode length; then the timed pair
    assert llm.batches == [[40] * 3, [16] * 3, [40] * 3, [16] * 3]

    llm = _RecordingLLM()
    monkeypatch.setattr(engine, "build_llm", lambda *args: llm)
    engine.serve("model", Workload(num_prompts=2, prompt_len=40), ["quit"], tmp_path / "other")
    assert llm.batches == [[40] * 2]


def test_the_engine_watch_times_collections_from_the_watch_on():
    import gc
    import types

    worker = types.SimpleNamespace()
    callbacks = len(gc.callbacks)
    try:
        engine.watch_engine(worker)
        engine.watch_engine(worker)  # a second watch replaces the first
        assert len(gc.callbacks) == callbacks + 1
        gc.collect()  # a full collection
        report = engine.engine_report(worker)
    finally:
        engine.unwatch_engine(worker)
    assert len(gc.callbacks) == callbacks and not hasattr(worker, "_vllm_fl_watch")
    assert report["pid"] == os.getpid()
    assert report["gc_collections"] >= report["gc_full_collections"] >= 1
    assert report["gc_ms"] >= report["gc_max_ms"] > 0
    assert report["allocator"] is None  # no GPU here


def test_the_engine_watch_times_tritons_jit_misses_between_its_hooks():
    import types

    knobs = pytest.importorskip("triton").knobs.runtime
    seen = []

    def original_post(**kwargs):
        seen.append(kwargs["fn"].name)

    knobs.jit_post_compile_hook = original_post
    worker = types.SimpleNamespace()
    try:
        engine.watch_engine(worker)
        for name in ("rms_norm_kernel", "rotary_kernel", "rms_norm_kernel"):
            # as JITFunction._do_compile calls them around a compilation
            fn = types.SimpleNamespace(name=name)
            assert knobs.jit_cache_hook(key=name, fn=fn) is False
            knobs.jit_post_compile_hook(key=name, fn=fn)
        report = engine.engine_report(worker)
    finally:
        engine.unwatch_engine(worker)
        restored = knobs.jit_cache_hook, knobs.jit_post_compile_hook
        knobs.jit_post_compile_hook = None
    assert report["jit_misses"] == 3
    assert report["jit_ms"] >= report["jit_max_ms"] >= 0
    assert {name: n for name, (n, _ms) in report["jit_by_kernel"].items()} == {
        "rms_norm_kernel": 2,
        "rotary_kernel": 1,
    }
    assert seen == ["rms_norm_kernel", "rotary_kernel", "rms_norm_kernel"]  # the hook chained
    assert restored == (None, original_post)  # unwatch put the hooks back


def _fake_task(root, pid: int, tid: int, comm: str, ticks: tuple[int, int], children=()) -> None:
    task = root / str(pid) / "task" / str(tid)
    task.mkdir(parents=True)
    (task / "comm").write_text(comm + "\n")
    # after the command name: state, ten fields, then utime and stime in clock ticks
    (task / "stat").write_text(f"{tid} ({comm}) S {' '.join(['0'] * 10)} {ticks[0]} {ticks[1]} 0\n")
    (task / "children").write_text(" ".join(str(c) for c in children))
    if tid == pid:  # the main thread names the process
        (root / str(pid) / "comm").write_text(comm + "\n")


def test_threads_cpu_seconds_of_this_process_and_its_children(tmp_path):
    tick = os.sysconf("SC_CLK_TCK")
    me, child = os.getpid(), 999999
    (tmp_path / "self" / "task").mkdir(parents=True)
    _fake_task(tmp_path, me, me, "python", (tick, tick), children=[child])
    _fake_task(tmp_path, me, me + 1, "ZMQbg/IO/0", (0, 0))
    _fake_task(tmp_path, child, child, "VLLM::EngineCor", (3 * tick, tick))
    report = engine.threads_cpu_s(str(tmp_path))
    assert report == {
        f"{me} python": [["python", 2.0], ["ZMQbg/IO/0", 0.0]],
        f"{child} VLLM::EngineCor": [["VLLM::EngineCor", 4.0]],
    }
    assert engine.threads_cpu_s(str(tmp_path / "nowhere")) == {}


def recording_task(llm, workload):
    """An engine task for the test below: what it was given, and a mode of its own."""
    return {"llm": llm, "options": workload.task_options, "mode": "steps"}


@pytest.mark.skipif(not vllm_available(), reason="needs vLLM")
def test_a_task_takes_over_once_the_engine_is_built(monkeypatch):
    monkeypatch.setattr(
        engine, "build_llm", lambda model, mode, llm_args, dummy_range=None: f"LLM of {model}"
    )
    workload = Workload(task=f"{__name__}:recording_task", task_options={"rounds": 2})
    result = engine.run("model-dir", workload)
    assert result["llm"] == "LLM of model-dir" and result["options"] == {"rounds": 2}
    assert result["mode"] == "steps"  # the task's own, not the workload's
    assert "platform" in result and "tokens" not in result


def test_a_task_is_named_module_colon_function():
    with pytest.raises(ValueError, match="expected module:function"):
        Workload(task="benchmarks.census")


#: what a process vLLM spawns does first: re-import the runner's main module as __mp_main__,
#: then report the bounds its dummy-weight initialiser now defaults to
SPAWNED_CHILD = """
import inspect, json, runpy
runpy.run_module("vllm_fl.testing.engine", run_name="__mp_main__", alter_sys=True)
from vllm.model_executor.model_loader import weight_utils
init = getattr(weight_utils, "initialize_dummy_weights", None)  # vLLM 0.24
init = init or weight_utils.initialize_single_dummy_weight  # vLLM 0.32
import torch
packed = [torch.empty(64, 8, dtype=torch.int32) for _ in range(2)]
for words in packed:
    weight_utils.initialize_single_dummy_weight(words)
print(json.dumps(inspect.unwrap(init).__defaults__[:2]))
print(json.dumps([words.tolist() for words in packed]))
"""


@pytest.mark.skipif(not vllm_available(), reason="needs vLLM")
@pytest.mark.parametrize("bound", [None, 0.05])
def test_a_spawned_engine_process_draws_the_runners_dummy_weights(bound):
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != engine.DUMMY_RANGE_ENV}
    if bound is not None:
        env[engine.DUMMY_RANGE_ENV] = repr(bound)
    out = subprocess.run(
        [sys.executable, "-c", SPAWNED_CHILD], env=env, capture_output=True, text=True, check=True
    ).stdout
    bounds, packed = out.strip().splitlines()[-2:]
    assert tuple(json.loads(bounds)) == ((-bound, bound) if bound else (-1e-3, 1e-3))
    if bound is not None:
        # integer weights (packed 4-bit words here): seeded random values, the same every time
        first, second = json.loads(packed)
        assert first == second and len({word for row in first for word in row}) > 400


def test_token_id_prompts_stay_inside_a_small_vocabulary():
    bert = Workload(prompt_len=64, num_prompts=8, prompt_vocab=30522)
    ids = [i for prompt in engine.prompts(bert) for i in prompt["prompt_token_ids"]]
    assert max(ids) < 30522 and min(ids) >= 1000
    tiny = Workload(prompt_len=64, num_prompts=8, prompt_vocab=384)
    ids = [i for prompt in engine.prompts(tiny) for i in prompt["prompt_token_ids"]]
    assert max(ids) < 384 and min(ids) >= 192

"""Greedy generation with real vLLM in THIS process: the child side of `vllm_fl.testing.launch`.

Run as ``python -m vllm_fl.testing.engine --model DIR --workload JSON --result FILE`` in a fresh
interpreter, so that every run gets clean environment variables and vLLM's plugin loading happens
from scratch; the caller chooses the plugin setup through the environment (`VLLM_PLUGINS`,
`VLLM_FL_PLATFORM`, `VLLM_FL_OOT_BLACKLIST`, `VLLM_ENABLE_V1_MULTIPROCESSING`, ...) and the work
through a `Workload`: text prompts for a model with a tokenizer, or random token-id prompts of a
given length (dummy weights, no tokenizer), an optional second batch of short prompts
(decode-heavy), the keyword arguments of `vllm.LLM`, and optionally a task (``module:function``)
that takes over once the engine is built (a profiler, a census of the kernels that ran).

The result holds the generated token ids, the timings (vLLM import, engine start-up, generation,
output tokens per second), the platform class and, when the plugin is loaded in this process, the
dispatch's record of which implementation each op used; when the model runs in this process also
the class of every CustomOp layer and the forward method vLLM bound for it, and the attention
backend (and impl) class of the attention layers. It travels back in the result file
(`vllm_fl.testing.child`), never on stdout, where vLLM's own log lines go.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vllm_fl.testing.child import add_result_argument, answer_commands, write_result

TEXT_PROMPTS = (
    "The quick brown fox",
    "Operators dispatch between",
    "Hello world!",
    "A tiny random Llama",
)
#: vllm.LLM's keyword arguments for a small float32 model with a tokenizer (the tests' models)
SMALL_MODEL_ARGS = {"dtype": "float32", "max_model_len": 128}
#: token ids of random prompts are drawn from this range (inside any real vocabulary)
PROMPT_TOKEN_RANGE = (1000, 100000)


#: how a workload runs the model: eager, or compiled by torch.compile with CUDA graphs
MODES = ("eager", "compile")


@dataclass(frozen=True)
class Workload:
    """What one run generates and how vLLM is built for it."""

    mode: str = "eager"  # eager (enforce_eager=True) | compile (vLLM's default)
    max_tokens: int = 24  # output tokens per prompt (ignore_eos: always this many)
    num_prompts: int | None = None  # default: one per text prompt
    prompt_len: int | None = None  # random token-id prompts of this length instead of text
    decode_prompt_len: int | None = None  # also time the prompts cut to this length
    warmup_prompts: int = 1  # prompts generated once before the timed batch
    timed_repeats: int = 1  # the timed batches are generated this many times; the best counts
    host_probe: bool = False  # also time torch.empty on the GPU (the host's speed)
    watch_engine: bool = False  # report the engine process's GC pauses and allocator retries
    llm_args: dict = field(default_factory=lambda: dict(SMALL_MODEL_ARGS))
    #: "module:function" called as function(llm, workload) once the engine is built; the dict it
    #: returns is the run's result (with the platform and the dispatch's record)
    task: str | None = None
    task_options: dict = field(default_factory=dict)
    #: a folder searched for modules after the installed distributions (PYTHONPATH puts one
    #: before them): where a plugin should load after ours
    append_path: str | None = None
    #: dummy weights drawn from [-r, r] instead of vLLM's [-1e-3, 1e-3], whose full-size models
    #: give every token the same logit (greedy tokens then agree between any two kernels); in
    #: vLLM's engine process too, forked or spawned (`DUMMY_RANGE_ENV`)
    dummy_range: float | None = None
    #: random prompts' token ids stay below this (the model's vocabulary, where it is smaller
    #: than `PROMPT_TOKEN_RANGE`'s end: GPT-2, OPT, BERT, Mistral, ...)
    prompt_vocab: int | None = None

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"Workload.mode is {self.mode!r}; allowed: {', '.join(MODES)}")
        if self.decode_prompt_len is not None and self.prompt_len is None:
            raise ValueError("Workload.decode_prompt_len needs token-id prompts (prompt_len)")
        if self.timed_repeats < 1:
            raise ValueError(f"Workload.timed_repeats is {self.timed_repeats}; allowed: 1 or more")
        if self.task is not None and ":" not in self.task:
            raise ValueError(f"Workload.task is {self.task!r}; expected module:function")

    def argv(self) -> list[str]:
        """The runner's command-line arguments for this workload."""
        return ["--workload", json.dumps(asdict(self))]

    @classmethod
    def from_json(cls, text: str) -> Workload:
        return cls(**json.loads(text))

    @property
    def detokenize(self) -> bool:
        return not self.llm_args.get("skip_tokenizer_init", False)


#: the dummy weights' bound for the processes vLLM starts: one forked from this process keeps
#: its widened initialisers, one spawned re-imports this (main) module, which widens its own
DUMMY_RANGE_ENV = "VLLM_FL_TEST_DUMMY_RANGE"


def widen_dummy_weights(bound: float) -> None:
    """vLLM's dummy weights drawn from [-bound, bound], and its integer ones (int8 weights, packed
    GPTQ/AWQ words), which it leaves as ``torch.empty`` garbage that differs from process to
    process, drawn from a seeded generator: two engines then hold the same weights, and tokens
    compared between them mean something. Sets the default bounds of vLLM's initialisers, which
    its dummy loader calls without bounds (``initialize_dummy_weights`` in 0.24, which passes its
    own on, and ``initialize_single_dummy_weight``), and wraps the latter once."""
    from vllm.model_executor.model_loader import weight_utils

    for name in ("initialize_dummy_weights", "initialize_single_dummy_weight"):
        init = getattr(weight_utils, name, None)
        if init is not None:
            init = inspect.unwrap(init)  # torch.no_grad's wrapper keeps no defaults
            low, high, *rest = init.__defaults__
            init.__defaults__ = (-bound, bound, *rest)
    single = weight_utils.initialize_single_dummy_weight
    if not getattr(single, "draws_integers", False):
        weight_utils.initialize_single_dummy_weight = _drawing_integers(single)
    # the dummy loader binds the model-level initialiser by name
    modules = [weight_utils]
    try:
        from vllm.model_executor.model_loader import dummy_loader

        modules.append(dummy_loader)
    except ImportError:
        pass
    for module in modules:
        model_level = getattr(module, "initialize_dummy_weights", None)
        if model_level is not None and not getattr(model_level, "keeps_buffers", False):
            module.initialize_dummy_weights = _keeping_buffers(model_level)


#: integer weights `widen_dummy_weights` draws: int8 values, packed 4/8-bit words
RANDOM_INTEGER_DTYPES = ("int8", "uint8", "int32")


#: data pointers of the buffers of the module whose dummy weights are being drawn
_BUFFERS: set[int] = set()


def _keeping_buffers(initialise_model):
    """`initialise_model` (vLLM's initialiser of a module's state dict), but the module's integer
    buffers keep their values: they are state vLLM computed (an expert map under expert
    parallelism, ...), which random integers would turn into out-of-range indices."""

    @functools.wraps(initialise_model)
    def initialise(model, *args, **kwargs):
        _BUFFERS.update(buffer.data_ptr() for buffer in model.buffers())
        try:
            return initialise_model(model, *args, **kwargs)
        finally:
            _BUFFERS.clear()

    initialise.keeps_buffers = True
    return initialise


def _drawing_integers(initialise):
    """`initialise` (vLLM's one-tensor dummy initialiser), but integer tensors of
    `RANDOM_INTEGER_DTYPES` get seeded random values over their whole range."""
    import torch

    @functools.wraps(initialise)
    def initialise_with_integers(param, *args, **kwargs):
        dtype = str(param.dtype).removeprefix("torch.")
        if param.device.type == "meta" or dtype not in RANDOM_INTEGER_DTYPES:
            return initialise(param, *args, **kwargs)
        if param.data_ptr() in _BUFFERS:
            return None
        # (param, low, high, seed), as vLLM calls it
        seed = kwargs.get("seed", args[2] if len(args) > 2 else 1234)
        generator = torch.Generator(device=param.device).manual_seed(seed)
        info = torch.iinfo(param.dtype)
        drawn = torch.randint(
            info.min, info.max, param.shape, generator=generator, device=param.device
        )
        with torch.no_grad():
            param.copy_(drawn.to(param.dtype))

    initialise_with_integers.draws_integers = True
    return initialise_with_integers


def build_llm(model: str | Path, mode: str, llm_args: dict, dummy_range: float | None = None):
    """`vllm.LLM` for `model`: eager (enforce_eager) or compiled, seed 0, `llm_args`."""
    from vllm import LLM

    if dummy_range is not None:
        os.environ[DUMMY_RANGE_ENV] = repr(dummy_range)
        widen_dummy_weights(dummy_range)

    return LLM(model=str(model), enforce_eager=mode == "eager", seed=0, **llm_args)


def sampling_params(max_tokens: int, detokenize: bool = True, logprobs: int | None = None):
    """Greedy sampling of exactly `max_tokens` tokens (with the `logprobs` most likely tokens'
    log-probabilities per step, the sampled one's included, where given)."""
    from vllm import SamplingParams

    return SamplingParams(
        temperature=0.0,
        max_tokens=max_tokens,
        ignore_eos=True,
        detokenize=detokenize,
        logprobs=logprobs,
    )


def prompts(workload: Workload, seed: int = 0) -> list:
    """The timed batch: text prompts in turn, or random token-id prompts drawn with ``seed``."""
    if workload.prompt_len is None:
        count = workload.num_prompts or len(TEXT_PROMPTS)
        return [TEXT_PROMPTS[i % len(TEXT_PROMPTS)] for i in range(count)]
    rng = random.Random(seed)
    low, high = PROMPT_TOKEN_RANGE
    if workload.prompt_vocab is not None:
        # a vocabulary below the range's start: its upper half, still clear of special tokens
        high = min(high, workload.prompt_vocab)
        low = min(low, high // 2)
    return [
        {"prompt_token_ids": [rng.randrange(low, high) for _ in range(workload.prompt_len)]}
        for _ in range(workload.num_prompts or len(TEXT_PROMPTS))
    ]


def cut_prompts(batch: list[dict], length: int) -> list[dict]:
    """Token-id prompts cut to their first ``length`` tokens (the decode-heavy batch)."""
    return [{"prompt_token_ids": p["prompt_token_ids"][:length]} for p in batch]


def run(model: str | Path, workload: Workload) -> dict:
    """Build the engine, generate, report (see the module docstring)."""
    started = time.perf_counter()
    import vllm  # noqa: F401  (timed apart from the engine's start-up)

    import_s = time.perf_counter() - started
    start = time.perf_counter()
    llm = build_llm(model, workload.mode, workload.llm_args, workload.dummy_range)
    init_s = time.perf_counter() - start
    if workload.task is not None:
        module, _, function = workload.task.partition(":")
        found = getattr(importlib.import_module(module), function)(llm, workload)
        # what the task reports wins over the run's record (a task may name its own mode, and
        # in vLLM's default process layout this process's dispatch record is not the workers')
        return {**_platform_record(workload), **_dispatch_record(workload.mode), **found}

    # A repeat gets prompts of its own: the same prompts again would be served from vLLM's
    # prefix cache, without their prefill.
    batches = [prompts(workload, seed) for seed in range(workload.timed_repeats)]
    batch = batches[0]
    params = sampling_params(workload.max_tokens, workload.detokenize)
    llm.generate(batch[: workload.warmup_prompts], params, use_tqdm=False)  # not timed
    if workload.watch_engine:
        llm.collective_rpc(watch_engine)
    outputs, generate_times = _timed_generate(llm, batches, params)
    generate_s = min(generate_times)
    tokens = [list(out.outputs[0].token_ids) for out in outputs]
    n_out = sum(len(t) for t in tokens)

    result = {
        **_platform_record(workload),
        "tokens": tokens,
        "import_s": round(import_s, 4),
        "init_s": round(init_s, 3),
        "generate_s": round(generate_s, 4),
        "generate_s_all": [round(t, 4) for t in generate_times],
        "output_tokens": n_out,
        "prompt_tokens": sum(len(o.prompt_token_ids or ()) for o in outputs),
        "tokens_per_s": round(n_out / generate_s, 1),
        "in_process": os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0",
    }
    if workload.decode_prompt_len is not None:
        shorts = [cut_prompts(b, workload.decode_prompt_len) for b in batches]
        decoded, decode_times = _timed_generate(llm, shorts, params)
        result["decode_s"] = round(min(decode_times), 4)
        result["decode_s_all"] = [round(t, 4) for t in decode_times]
        result["decode_tokens"] = sum(len(o.outputs[0].token_ids) for o in decoded)
    if workload.watch_engine:
        result["engine"] = llm.collective_rpc(engine_report)[0]
        result["runner_pid"] = os.getpid()
    result["threads_cpu_s"] = threads_cpu_s()
    if workload.host_probe:
        result["host_us"] = round(host_probe_us(), 3)
    if result["in_process"]:
        result["layer_classes"] = llm.apply_model(_layer_classes)[0]
        result["forward_methods"] = llm.apply_model(_forward_method_names)[0]
        result["attention_backends"] = llm.apply_model(_attention_backends)[0]
    result.update(_dispatch_record(workload.mode))
    return result


#: the seed of the prompts `serve` warms an engine up with (the batches' seeds are counted from 0)
WARMUP_SEED = 1_000_000


def serve(model: str | Path, workload: Workload, commands, result: Path, compared: int = 4) -> None:
    """Build the engine once, then generate a timed batch for every ``batch SEED`` line read
    from ``commands`` until ``quit``; each answer is a result file (`child.answer_commands`).

    Answers: on start ``{"ready": true, "import_s", "init_s"}`` (after a warm-up batch of
    each kind: full prompts, and cut ones where the workload has a decode part), per
    batch ``{"seed", "generate_s", "output_tokens", "prompt_tokens", "tokens"}`` (the greedy
    tokens of the first ``compared`` prompts), with ``decode_s`` and ``decode_tokens`` for the
    prompts cut to ``workload.decode_prompt_len`` where the workload has one; on ``quit`` the
    dispatch's record and the threads' CPU seconds. A caller that keeps two engines resident
    can so let them take turns batch by batch."""
    started = time.perf_counter()
    import vllm  # noqa: F401  (timed apart from the engine's start-up)

    import_s = time.perf_counter() - started
    start = time.perf_counter()
    llm = build_llm(model, workload.mode, workload.llm_args, workload.dummy_range)
    init_s = time.perf_counter() - start
    params = sampling_params(workload.max_tokens, workload.detokenize)
    warmup = prompts(workload, WARMUP_SEED)
    # Both kinds of timed batch once, untimed, so that neither engine's first pair meets a JIT
    # compilation or a new kernel layout the other has already seen.
    llm.generate(warmup, params, use_tqdm=False)
    if workload.decode_prompt_len is not None:
        llm.generate(cut_prompts(warmup, workload.decode_prompt_len), params, use_tqdm=False)

    def batch(words: list[str]) -> dict:
        seed = int(words[1])
        batch = prompts(workload, seed)
        outputs, (generate_s,) = _timed_generate(llm, [batch], params)
        result = {
            "seed": seed,
            "generate_s": round(generate_s, 4),
            "output_tokens": sum(len(o.outputs[0].token_ids) for o in outputs),
            "prompt_tokens": sum(len(o.prompt_token_ids or ()) for o in outputs),
            "tokens": [list(o.outputs[0].token_ids) for o in outputs[:compared]],
        }
        if workload.decode_prompt_len is not None:
            shorts = cut_prompts(batch, workload.decode_prompt_len)
            decoded, (decode_s,) = _timed_generate(llm, [shorts], params)
            result["decode_s"] = round(decode_s, 4)
            result["decode_tokens"] = sum(len(o.outputs[0].token_ids) for o in decoded)
        return result

    ready = {
        "ready": True,
        "import_s": round(import_s, 4),
        "init_s": round(init_s, 3),
        "settings": engine_settings(llm.llm_engine.vllm_config),
    }
    answer_commands(commands, result, ready, {"batch": batch})
    write_result(
        result, {"done": True, "threads_cpu_s": threads_cpu_s(), **_dispatch_record(workload.mode)}
    )


#: The settings of an engine that decide how a batch is cut into steps and which kernels see
#: which shapes: two engines that differ in one of them may round differently on the same
#: weights (cuBLAS picks its GEMM by the number of tokens in a step).
ENGINE_SETTINGS = {
    "scheduler_config": (
        "max_num_batched_tokens",
        "max_num_seqs",
        "enable_chunked_prefill",
        "async_scheduling",
    ),
    "cache_config": ("block_size", "num_gpu_blocks", "enable_prefix_caching", "cache_dtype"),
    "compilation_config": ("mode", "cudagraph_mode"),
}


def engine_settings(vllm_config) -> dict[str, str]:
    """``ENGINE_SETTINGS`` of an engine's ``VllmConfig`` as ``{"scheduler_config.max_num_seqs":
    "1024", ...}`` (strings, so that any two compare and print alike; a setting this vLLM lacks
    is left out)."""
    found = {}
    for part, names in ENGINE_SETTINGS.items():
        config = getattr(vllm_config, part, None)
        for name in names:
            if config is not None and hasattr(config, name):
                found[f"{part}.{name}"] = str(getattr(config, name))
    return found


def _platform_record(workload: Workload) -> dict:
    """The run's mode, dtype and vLLM's platform class."""
    from vllm.platforms import current_platform

    return {
        "mode": workload.mode,
        "dtype": str(workload.llm_args.get("dtype", "auto")),
        "platform": f"{type(current_platform).__module__}.{type(current_platform).__name__}",
    }


def greedy_logprobs(llm, workload: Workload) -> dict:
    """A task (``Workload.task``): the text prompts' greedy tokens and, for the first generated
    token, the ``task_options["top"]`` (default 5) most likely tokens with their logprobs
    (``{"tokens": [[id, ...], ...], "first_logprobs": [[[id, logprob], ...], ...]}``): what two
    runs whose arithmetic differs (a quantized model and its unquantized twin) are compared on."""
    from vllm import SamplingParams

    top = int(workload.task_options.get("top", 5))
    params = SamplingParams(
        temperature=0.0, max_tokens=workload.max_tokens, ignore_eos=True, logprobs=top
    )
    outputs = llm.generate(prompts(workload), params, use_tqdm=False)
    first = []
    for output in outputs:
        step = output.outputs[0].logprobs[0]
        ranked = sorted(step.items(), key=lambda item: -item[1].logprob)[:top]
        first.append([[int(token), float(entry.logprob)] for token, entry in ranked])
    return {
        "tokens": [list(output.outputs[0].token_ids) for output in outputs],
        "first_logprobs": first,
    }


def embed_task(llm, workload: Workload) -> dict:
    """A task (``Workload.task``) for an embedding model (``llm_args={"runner": "pooling"}``):
    the text prompts' embeddings (``{"embeddings": [[float, ...], ...]}``, vLLM's default
    pooling and normalisation for the model) and, when the model runs in this process, the
    layers' classes, their bound forward methods and the attention backends, as `run` reports
    them for a generation."""
    outputs = llm.embed(prompts(workload), use_tqdm=False)
    result: dict = {"embeddings": [[float(x) for x in out.outputs.embedding] for out in outputs]}
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
        result["layer_classes"] = llm.apply_model(_layer_classes)[0]
        result["forward_methods"] = llm.apply_model(_forward_method_names)[0]
        result["attention_backends"] = llm.apply_model(_attention_backends)[0]
    return result


def reload_task(llm, workload: Workload) -> dict:
    """A task (``Workload.task``): the text prompts' greedy tokens, then vLLM's in-place weight
    reload (``reload_weights`` in every worker) from the checkpoint at
    ``task_options["weights_path"]``, then the same prompts' greedy tokens again
    (``{"before": [[id, ...], ...], "after": [...]}``)."""
    params = sampling_params(workload.max_tokens, detokenize=False)

    def tokens() -> list[list[int]]:
        outputs = llm.generate(prompts(workload), params, use_tqdm=False)
        return [list(output.outputs[0].token_ids) for output in outputs]

    before = tokens()
    llm.collective_rpc(
        "reload_weights", kwargs={"weights_path": workload.task_options["weights_path"]}
    )
    return {"before": before, "after": tokens()}


def _timed_generate(llm, batches: list[list], params) -> tuple[list, list[float]]:
    """Generate each batch in turn; the first batch's outputs and the seconds of every batch.
    The fastest is the run's figure: a slower one was held up by something else on the host
    (eager generation is bound by the host's CPU)."""
    times, generated = [], []
    for batch in batches:
        start = time.perf_counter()
        generated.append(llm.generate(batch, params, use_tqdm=False))
        times.append(time.perf_counter() - start)
    return generated[0], times


#: the caching allocator's counters an engine report gives (as growth since `watch_engine`)
ALLOCATOR_COUNTS = ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free")


def _allocator_counts() -> dict[str, int] | None:
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    stats = torch.cuda.memory_stats()
    return {key: stats.get(key, 0) for key in ALLOCATOR_COUNTS}


def _triton_runtime_knobs():
    """Triton's runtime knobs where they have the JIT hooks (Triton 3.4 and later), else None."""
    try:
        from triton import knobs
    except ImportError:
        return None
    runtime = getattr(knobs, "runtime", None)
    return runtime if hasattr(runtime, "jit_post_compile_hook") else None


def watch_engine(worker) -> None:
    """Run in the engine's worker process (``LLM.collective_rpc``): from now on, time the
    garbage collector's pauses and Triton's JIT misses (a kernel specialisation compiled, or
    loaded from Triton's disk cache, by the call that first needs it in this process), and
    count the caching allocator's retries. The state lives on the worker: vLLM sends this
    function by value, so module globals would not persist."""
    import gc

    unwatch_engine(worker)
    watch = {"pauses": [], "jit": [], "started": [], "jit_started": []}
    watch["allocator"] = _allocator_counts()

    def collected(phase: str, info: dict) -> None:
        if phase == "start":
            watch["started"].append(time.perf_counter())
        elif watch["started"]:
            seconds = time.perf_counter() - watch["started"].pop()
            watch["pauses"].append((seconds, info["generation"]))

    gc.callbacks.append(collected)
    watch["gc_callback"] = collected
    runtime = _triton_runtime_knobs()
    if runtime is not None:
        before_hook, after_hook = runtime.jit_cache_hook, runtime.jit_post_compile_hook

        def before(**kwargs):
            skip = before_hook(**kwargs) if before_hook else False
            if not skip:  # a true answer skips the compilation, and the hook after it
                watch["jit_started"].append(time.perf_counter())
            return skip

        def after(**kwargs):
            if watch["jit_started"]:
                seconds = time.perf_counter() - watch["jit_started"].pop()
                watch["jit"].append((getattr(kwargs.get("fn"), "name", "?"), seconds))
            if after_hook:
                after_hook(**kwargs)

        runtime.jit_cache_hook, runtime.jit_post_compile_hook = before, after
        watch["jit_hooks"] = (runtime, before_hook, after_hook)
    worker._vllm_fl_watch = watch


def unwatch_engine(worker) -> None:
    """Undo `watch_engine` in this process (the collector callback, Triton's hooks)."""
    import gc

    watch = getattr(worker, "_vllm_fl_watch", None)
    if watch is None:
        return
    if watch["gc_callback"] in gc.callbacks:
        gc.callbacks.remove(watch["gc_callback"])
    if "jit_hooks" in watch:
        runtime, before_hook, after_hook = watch["jit_hooks"]
        runtime.jit_cache_hook, runtime.jit_post_compile_hook = before_hook, after_hook
    del worker._vllm_fl_watch


def engine_report(worker) -> dict:
    """Run in the engine's worker process after `watch_engine`: its process id, the garbage
    collector's pauses (count, total, longest, those of 50 ms or more, full collections),
    Triton's JIT misses (count, total, longest, the kernels with the most time) and the
    allocator counters' growth (None without a GPU)."""
    watch = worker._vllm_fl_watch
    pauses = [seconds * 1e3 for seconds, _generation in watch["pauses"]]
    jit_ms = [seconds * 1e3 for _name, seconds in watch["jit"]]
    by_kernel: dict[str, list] = {}
    for name, seconds in watch["jit"]:
        entry = by_kernel.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += seconds * 1e3
    top = sorted(by_kernel.items(), key=lambda item: -item[1][1])[:10]
    before, now = watch["allocator"], _allocator_counts()
    return {
        "pid": os.getpid(),
        "gc_collections": len(pauses),
        "gc_full_collections": sum(1 for _s, generation in watch["pauses"] if generation == 2),
        "gc_ms": round(sum(pauses), 1),
        "gc_max_ms": round(max(pauses, default=0.0), 1),
        "gc_pauses_50ms": sorted((round(ms) for ms in pauses if ms >= 50), reverse=True),
        "jit_misses": len(jit_ms),
        "jit_ms": round(sum(jit_ms), 1),
        "jit_max_ms": round(max(jit_ms, default=0.0), 1),
        "jit_by_kernel": {name: [n, round(ms, 1)] for name, (n, ms) in top},
        "allocator": (
            None
            if before is None or now is None
            else {key: now[key] - before[key] for key in ALLOCATOR_COUNTS}
        ),
    }


def threads_cpu_s(root: str = "/proc", top: int = 6) -> dict[str, list]:
    """CPU seconds so far of the busiest threads of this process and of its child processes
    (the engine core in vLLM's default layout), by process: a thread that competes with the
    engine's own shows here. Empty where there is no ``/proc``."""
    if not os.path.isdir(f"{root}/self/task"):
        return {}
    ticks = os.sysconf("SC_CLK_TCK")
    pending, seen, report = [str(os.getpid())], set(), {}
    while pending:
        pid = pending.pop()
        if pid in seen or not os.path.isdir(f"{root}/{pid}/task"):
            continue
        seen.add(pid)
        threads = []
        for tid in os.listdir(f"{root}/{pid}/task"):
            task = f"{root}/{pid}/task/{tid}"
            try:
                comm = Path(f"{task}/comm").read_text().strip()
                fields = Path(f"{task}/stat").read_text().rsplit(")", 1)[1].split()
                children = Path(f"{task}/children").read_text().split()
            except OSError:  # the thread ended meanwhile
                continue
            # utime and stime: fields 14 and 15 of stat, 12th and 13th after the command name
            threads.append([comm, round((int(fields[11]) + int(fields[12])) / ticks, 2)])
            pending.extend(children)
        threads.sort(key=lambda row: -row[1])
        try:
            name = Path(f"{root}/{pid}/comm").read_text().strip()
        except OSError:  # the process ended meanwhile
            continue
        report[f"{pid} {name}"] = threads[:top]
    return report


def host_probe_us(calls: int = 20000) -> float:
    """Microseconds per ``torch.empty(16, device="cuda")``: the speed of this process's host
    CPU for the kind of work an eager engine step consists of (small dispatcher calls)."""
    import torch

    torch.empty(16, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        torch.empty(16, device="cuda")
    return (time.perf_counter() - t0) / calls * 1e6


def _dispatch_record(mode: str) -> dict:
    """The plugin's record, where it is loaded in this process: the impl each op used (traced by
    torch.compile apart), the vLLM layers it replaced, and the calls the plugin's Mamba2
    adapters, attention layers and unquantized GEMM adapters made of their ops."""
    if "vllm_fl.dispatch" not in sys.modules:
        return {}
    from vllm_fl import compat
    from vllm_fl.dispatch import get_default_manager

    manager = get_default_manager()
    record = {"used_impls": dict(sorted(manager.used_impls().items()))}
    if mode == "compile":
        record["used_impls_traced"] = dict(sorted(manager.used_impls(traced=True).items()))
    record["replaced"] = sorted(compat.oot_registry())
    if "vllm_fl.mamba" in sys.modules:
        from vllm_fl import mamba

        # the Mamba2 mixer's kernels: where the adapters sit, and the calls they made
        record["mamba_sites"] = mamba.installed()
        record["mamba_calls"] = mamba.call_counts()
    if "vllm_fl.attention.backend" in sys.modules:
        from vllm_fl.attention import backend

        # the plugin's attention layers: calls of each op (decoder or encoder-only path)
        record["attention_calls"] = backend.call_counts()
    if "vllm_fl.linear" in sys.modules:
        from vllm_fl import linear

        # the unquantized linear layers' and LM head's GEMMs: eager calls of op linear
        record["linear_sites"] = linear.installed()
        record["linear_calls"] = linear.call_counts()
    return record


def _layer_classes(model) -> dict[str, str]:
    """In-tree class name -> 'module.Class' of the instance vLLM built, for every CustomOp."""
    from vllm.model_executor.custom_op import CustomOp

    found: dict[str, str] = {}
    for module in model.modules():
        if isinstance(module, CustomOp):
            cls = type(module)
            base = next(
                (c for c in cls.__mro__ if c.__module__.startswith("vllm.")), cls
            )  # the in-tree class, ours subclasses it
            found[base.__name__] = f"{cls.__module__}.{cls.__qualname__}"
    return found


def _attention_backends(model) -> dict[str, str]:
    """'module.Class' of every attention backend the model's attention layers use -> that of
    their impl."""
    found: dict[str, str] = {}
    for module in model.modules():
        backend, impl = getattr(module, "attn_backend", None), getattr(module, "impl", None)
        if isinstance(backend, type) and impl is not None:
            impl_cls = type(impl)
            found[f"{backend.__module__}.{backend.__qualname__}"] = (
                f"{impl_cls.__module__}.{impl_cls.__qualname__}"
            )
    return found


_FORWARDS = ("forward_oot", "forward_cpu", "forward_cuda", "forward_native")


def _forward_method_names(model) -> dict[str, str]:
    """In-tree class name -> which forward_* method CustomOp bound at construction."""
    from vllm.model_executor.custom_op import CustomOp

    found: dict[str, str] = {}
    for module in model.modules():
        if isinstance(module, CustomOp):
            base = next(c for c in type(module).__mro__ if c.__module__.startswith("vllm."))
            bound = getattr(getattr(module, "_forward_method", None), "__func__", None)
            names = [n for n in _FORWARDS if getattr(type(module), n, None) is bound]
            found[base.__name__] = names[0] if names else repr(bound)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--workload", type=Workload.from_json, default=Workload())
    add_result_argument(parser)
    parser.add_argument(
        "--serve",
        action="store_true",
        help="keep the engine and generate a batch per stdin command (see serve)",
    )
    args = parser.parse_args(argv)

    if args.workload.append_path:
        sys.path.append(args.workload.append_path)
    if args.serve:
        serve(args.model, args.workload, sys.stdin, args.result)
    else:
        write_result(args.result, run(args.model, args.workload))
    return 0


if __name__ == "__mp_main__" and DUMMY_RANGE_ENV in os.environ:
    # a process vLLM spawned (its engine core, its workers): the runner's dummy weights here too
    widen_dummy_weights(float(os.environ[DUMMY_RANGE_ENV]))

if __name__ == "__main__":
    sys.exit(main())

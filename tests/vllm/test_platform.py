"""Entry points and platforms: which platform register_platform() picks, what the platforms
change in vLLM's configuration, the CPU host worker, and a light `import vllm_fl`."""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
from contextlib import nullcontext
from types import SimpleNamespace

import pytest

import vllm_fl
from vllm_fl import compat

needs_vllm = pytest.mark.skipif(not compat.vllm_version(), reason="vLLM is not installed")


@pytest.fixture
def platform_env(monkeypatch):
    for var in ("VLLM_FL_PLATFORM", "VLLM_FL_PREFER_ENABLED"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_import_is_light():
    code = "import sys, vllm_fl; print(sorted({'vllm', 'torch'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "value, expected",
    [
        ("cpu", "vllm_fl.platform.cpu.PlatformFLCpu"),
        ("CPU", "vllm_fl.platform.cpu.PlatformFLCpu"),
        ("cuda", "vllm_fl.platform.cuda.PlatformFL"),
        ("ascend", None),
    ],
)
def test_register_platform_forced(platform_env, value, expected):
    platform_env.setenv("VLLM_FL_PLATFORM", value)
    assert vllm_fl.register_platform() == expected


def test_register_platform_auto(platform_env):
    platform_env.setattr(compat, "cuda_device_present", lambda: True)
    platform_env.setattr(compat, "is_cpu_build", lambda: False)
    assert vllm_fl.register_platform() == "vllm_fl.platform.cuda.PlatformFL"
    platform_env.setattr(compat, "cuda_device_present", lambda: False)
    assert vllm_fl.register_platform() is None  # no accelerator: vLLM keeps its own platform
    platform_env.setattr(compat, "cuda_device_present", lambda: True)
    platform_env.setattr(compat, "is_cpu_build", lambda: True)
    assert vllm_fl.register_platform() is None  # vLLM's CPU build on a GPU host


def test_register_platform_on_this_machine(platform_env):
    # No GPU here: the CPU host mode is opt-in, so nothing is activated by default.
    if compat.cuda_device_present() and not compat.is_cpu_build():
        pytest.skip("a GPU is visible")
    assert vllm_fl.register_platform() is None


def test_register_platform_off_switch(platform_env):
    platform_env.setenv("VLLM_FL_PLATFORM", "cpu")
    platform_env.setenv("VLLM_FL_PREFER_ENABLED", "false")
    assert vllm_fl.register_platform() is None


def test_register_platform_unknown_value_says_so(platform_env, caplog):
    platform_env.setenv("VLLM_FL_PLATFORM", "tpu9000")
    with caplog.at_level(logging.ERROR, logger="vllm_fl.vllm"):
        assert vllm_fl.register_platform() is None
    assert "tpu9000" in caplog.text and "cpu" in caplog.text


@needs_vllm
def test_cpu_host_platform_is_out_of_tree_cpu():
    from vllm.platforms.cpu import CpuPlatform
    from vllm.utils.import_utils import resolve_obj_by_qualname

    cls = resolve_obj_by_qualname("vllm_fl.platform.cpu.PlatformFLCpu")
    assert issubclass(cls, CpuPlatform)
    # named by the path vLLM loads it by, so that pickle finds it too
    assert (cls.__module__, cls.__qualname__) == ("vllm_fl.platform.cpu", "PlatformFLCpu")
    assert pickle.loads(pickle.dumps(cls)) is cls
    platform = cls()
    assert platform.is_out_of_tree() and not platform.is_cpu()
    assert platform.device_type == "cpu"


_BATCH_DEFAULTS = """
import json
from vllm.engine.arg_utils import EngineArgs
from vllm.platforms import current_platform
current_platform.pre_register_and_update()  # as EngineArgs.create_engine_config does first
tokens, seqs = EngineArgs.get_batch_defaults(1)
print(json.dumps({
    "platform": type(current_platform).__name__,
    "is_cpu": current_platform.is_cpu(),
    "defaults": {str(k): [tokens[k], seqs[k]] for k in tokens},
}))
"""


@needs_vllm
def test_cpu_host_platform_batches_as_vllms_cpu_platform():
    """vLLM picks its default tokens and sequences per step by ``is_cpu()``; the plugin's CPU
    platform answers False there, yet must cut batches into vanilla's steps."""

    def defaults(env: dict[str, str]) -> dict:
        done = subprocess.run(
            [sys.executable, "-c", _BATCH_DEFAULTS],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    vanilla = defaults({"VLLM_PLUGINS": "none"})
    plugin = defaults({"VLLM_PLUGINS": "fl", "VLLM_FL_PLATFORM": "cpu"})
    assert (vanilla["platform"], plugin["platform"]) == ("CpuPlatform", "PlatformFLCpu")
    assert vanilla["is_cpu"] and not plugin["is_cpu"]
    assert plugin["defaults"] == vanilla["defaults"]


@needs_vllm
def test_cuda_platform_needs_vllms_cuda_build():
    if not compat.is_cpu_build():
        from vllm.platforms.cuda import CudaPlatform

        from vllm_fl.platform.cuda import PlatformFL

        assert issubclass(PlatformFL, CudaPlatform)
        assert PlatformFL().is_out_of_tree() and PlatformFL().is_cuda()
        return
    import vllm_fl.platform  # importable on the CPU build; only PlatformFL needs CUDA vLLM

    with pytest.raises(ImportError, match="the installed vLLM is its CPU build"):
        import vllm_fl.platform.cuda  # noqa: F401


@needs_vllm
def test_cpu_host_worker_has_a_null_memory_pool_context():
    from vllm.v1.worker.cpu_worker import CPUWorker

    from vllm_fl.worker.cpu import CPUWorkerFL

    assert issubclass(CPUWorkerFL, CPUWorker)
    worker = object.__new__(CPUWorkerFL)  # the method reads nothing from the instance
    for tag in ("weights", "kv_cache", "workspace"):
        assert isinstance(worker._maybe_get_memory_pool_context(tag), nullcontext)


@pytest.mark.parametrize(
    "user, base, added",
    [
        ([], "none", ["+rms_norm", "+silu_and_mul"]),  # Inductor's default would bypass ours
        ([], "all", []),  # vLLM's default enables them already
        (["none"], "", []),  # the user's choices keep vLLM's meaning
        (["none", "+rms_norm"], "", []),
        (["-silu_and_mul"], "none", []),
    ],
)
def test_custom_ops_default_only_where_the_user_left_it(user, base, added):
    from vllm_fl.platform import apply_custom_ops_default, note_custom_ops_default

    config = SimpleNamespace(custom_ops=list(user))
    note_custom_ops_default(config)  # before vLLM appends its base mode
    if base:
        config.custom_ops.append(base)
    before = list(config.custom_ops)
    assert apply_custom_ops_default(config, ["rms_norm", "silu_and_mul"]) == added
    assert config.custom_ops == before + added


@needs_vllm
def test_cpu_worker_prepares_the_model_process_in_init_device(monkeypatch):
    from vllm.v1.worker.cpu_worker import CPUWorker

    from vllm_fl import registration
    from vllm_fl.worker.cpu import CPUWorkerFL

    calls = []
    monkeypatch.setattr(CPUWorker, "init_device", lambda self: calls.append("init_device"))
    monkeypatch.setattr(registration, "prepare_model_process", lambda c: calls.append(c))
    worker = object.__new__(CPUWorkerFL)
    worker.vllm_config = "config"
    worker.init_device()
    assert calls == ["init_device", "config"]


@needs_vllm
def test_general_plugin_replaces_nothing_on_an_in_tree_platform(clean_oot_registry):
    from vllm.platforms import current_platform

    if current_platform.is_out_of_tree():
        pytest.skip("this process runs on an out-of-tree platform")
    before = dict(clean_oot_registry)
    vllm_fl.register()
    vllm_fl.register()
    assert dict(clean_oot_registry) == before


def _run_vllm_code(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter with vLLM's CPU build, the plugin allowed, vLLM's default
    logging, and `env` on a clean environment (no inherited VLLM_* variables)."""
    from vllm_fl.testing.launch import vllm_env

    return subprocess.run(
        [sys.executable, "-c", code],
        env=vllm_env({"VLLM_PLUGINS": "fl", **env}),
        capture_output=True,
        text=True,
        timeout=300,
    )


@needs_vllm
def test_in_tree_platform_says_once_at_info_that_nothing_is_replaced():
    if not compat.is_cpu_build():
        pytest.skip("vLLM's CUDA build: the plugin's platform may be active")
    code = (
        "from vllm.plugins import load_general_plugins\n"
        "load_general_plugins()\n"
        "import vllm_fl\n"
        "vllm_fl.register()\n"  # a second call, as another process step would make
        "from vllm.platforms import current_platform\n"
        "print(type(current_platform).__name__)\n"
    )
    proc = _run_vllm_code(code, {})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["CpuPlatform"]
    lines = [line for line in proc.stderr.splitlines() if "replaces no layers" in line]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("[INFO] vllm_fl.vllm (MainProcess): vllm_fl: vLLM runs on its ")
    assert "in-tree platform CpuPlatform" in lines[0]
    assert "set VLLM_FL_PLATFORM=cpu to run it on vLLM's CPU build" in lines[0]
    quiet = _run_vllm_code(code, {"VLLM_FL_LOG_LEVEL": "WARNING"})
    assert quiet.returncode == 0 and "replaces no layers" not in quiet.stderr


@needs_vllm
def test_cuda_platform_on_vllms_cpu_build_is_a_clear_error():
    if not compat.is_cpu_build():
        pytest.skip("vLLM's CUDA build is installed")
    code = "from vllm.platforms import current_platform\nprint(current_platform.device_type)\n"
    proc = _run_vllm_code(code, {"VLLM_FL_PLATFORM": "cuda"})
    assert proc.returncode != 0 and proc.stdout == ""
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ImportError: vllm_fl: VLLM_FL_PLATFORM=cuda asks for the plugin's CUDA platform, but the "
        "installed vLLM is its CPU build (vLLM 0."
    ), proc.stderr[-3000:]
    assert "Set VLLM_FL_PLATFORM=cpu for the plugin's CPU host mode" in last
    assert "_C_stable_libtorch" not in proc.stderr

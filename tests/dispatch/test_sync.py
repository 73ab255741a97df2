"""The dispatch under threads and fork: blame goes to the implementation that raised, a policy
change wins over a fallback that started before it, a forked child never inherits a held lock."""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
import threading
import time

import pytest

from vllm_fl.dispatch import (
    OpImpl,
    OpManager,
    OpRegistry,
    Probe,
    SelectionPolicy,
    dispatch_method,
    set_global_policy,
)

PREFER_FLAGOS = SelectionPolicy.from_dict(prefer="flagos")
PREFER_VENDOR = SelectionPolicy.from_dict(prefer="vendor")
PREFER_REFERENCE = SelectionPolicy.from_dict(prefer="reference")
DENY_CUDA = SelectionPolicy.from_dict(prefer="vendor", deny_vendors=["cuda"])


def layer_for(manager: OpManager):
    class Layer:
        forward_oot = dispatch_method("norm", manager=manager)

    return Layer()


def registry_of(flagos, cuda, reference) -> OpRegistry:
    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("norm", "default.flagos", "flagos", flagos),
            OpImpl("norm", "vendor.cuda", "vendor", cuda, vendor="cuda"),
            OpImpl("norm", "reference.torch", "reference", reference),
        ]
    )
    return reg


def wait_or_kill(pid: int, timeout: float) -> int | None:
    """The child's exit status, or None (after killing it) when it is still running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


# --------------------------------------------------------------------------- blame and staleness


def test_blame_goes_to_the_impl_that_raised_not_the_one_selected_meanwhile(caplog_dispatch):
    set_global_policy(PREFER_FLAGOS)

    def flagos(self, x, residual=None):
        # Another thread changes the selection while this impl runs, then it raises.
        set_global_policy(PREFER_VENDOR)
        raise RuntimeError("error raised by default.flagos")

    def cuda(self, x, residual=None):
        return "cuda"

    def reference(self, x, residual=None):
        return "reference"

    m = OpManager(registry_of(flagos, cuda, reference))
    layer = layer_for(m)
    assert layer.forward_oot(1) == "cuda"
    assert m.failed_impls() == {"norm": ["default.flagos"]}
    warns = [r.getMessage() for r in caplog_dispatch.records if r.levelno == logging.WARNING]
    assert warns == [
        "Implementation 'default.flagos' failed for op 'norm': "
        "RuntimeError: error raised by default.flagos"
    ]
    set_global_policy(PREFER_FLAGOS)
    assert layer.forward_oot(2) == "cuda"  # the impl that raised stays excluded, cuda does not


def test_policy_change_during_a_fallback_wins_over_its_selection():
    set_global_policy(PREFER_VENDOR)
    ran: list[str] = []

    def flagos(self, x, residual=None):
        ran.append("flagos")
        return "flagos"

    def cuda(self, x, residual=None):
        ran.append("cuda")
        raise RuntimeError("cuda broke")

    def reference(self, x, residual=None):
        ran.append("reference")
        return "reference"

    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("norm", "vendor.cuda", "vendor", cuda, vendor="cuda"),
            OpImpl(
                "norm",
                "vendor.ascend",
                "vendor",
                lambda self, x, residual=None: ascend(x),
                vendor="ascend",
            ),
            OpImpl("norm", "default.flagos", "flagos", flagos),
            OpImpl("norm", "reference.torch", "reference", reference),
        ]
    )

    def ascend(x):
        # The fallback from cuda runs ascend; meanwhile ascend gets denied, and that call returns.
        ran.append("ascend")
        set_global_policy(SelectionPolicy.from_dict(prefer="vendor", deny_vendors=["ascend"]))
        return "ascend"

    m = OpManager(reg)
    layer = layer_for(m)
    assert layer.forward_oot(1) == "ascend"  # the call that started before the change completes
    # The later calls follow the new policy: ascend is not installed behind its back.
    assert layer.forward_oot(2) == "flagos"
    assert layer.forward_oot(3) == "flagos"
    assert ran == ["cuda", "ascend", "flagos", "flagos"]
    assert m.used_impls() == {"norm": "default.flagos"}


def test_threads_flipping_policy_with_injected_failures():
    """32 threads: 4 flip the policy (serialised, so a call can tell it ran in one policy epoch),
    one clears failure marks, 27 call the op while flagos and cuda fail at random. Invariants:
    the reference never fails, so it is never marked failed (blame); a call that starts and ends
    inside one epoch whose policy denies cuda never runs cuda (no stale selection); nothing hangs
    and nothing but the injected errors reaches a caller."""
    epoch = [0]  # odd while a flip is in progress
    deny = [False]
    flip_lock = threading.Lock()
    stop = threading.Event()
    problems: list[str] = []
    tls = threading.local()

    def maybe_fail(tag: str) -> None:
        rng = getattr(tls, "rng", None)
        if rng is not None and rng.random() < 0.15:
            time.sleep(0)  # let other threads flip the policy between the call and the raise
            raise RuntimeError(f"error raised by {tag}")

    def flagos(self, x, residual=None):
        maybe_fail("default.flagos")
        return "flagos"

    def cuda(self, x, residual=None):
        time.sleep(0)  # a fallback that runs cuda straddles policy flips
        maybe_fail("vendor.cuda")
        return "cuda"

    def reference(self, x, residual=None):
        return "reference"

    m = OpManager(registry_of(flagos, cuda, reference))
    layer = layer_for(m)
    policies = [PREFER_FLAGOS, PREFER_VENDOR, PREFER_REFERENCE, DENY_CUDA]

    def flipper(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(400):
            p = rng.choice(policies)
            with flip_lock:
                epoch[0] += 1
                set_global_policy(p)
                deny[0] = p is DENY_CUDA
                epoch[0] += 1
            time.sleep(0)

    def clearer() -> None:
        while not stop.is_set():
            m.clear_failed_impls()
            time.sleep(0.002)

    def caller(seed: int) -> None:
        tls.rng = random.Random(seed)
        for _ in range(3000):
            e0, denied = epoch[0], deny[0]
            try:
                out = layer.forward_oot(1)
            except Exception as exc:  # the reference never fails: a caller never sees an error
                problems.append(f"unexpected error: {exc!r}")
                continue
            if out == "cuda" and denied and e0 % 2 == 0 and epoch[0] == e0:
                problems.append("cuda ran in an epoch whose policy denies it")
            if "reference.torch" in m.failed_impls().get("norm", ()):
                problems.append(f"reference blamed: {m.failed_impls()}")

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=flipper, args=(i,)) for i in range(4)]
        threads.append(threading.Thread(target=clearer))
        threads += [threading.Thread(target=caller, args=(100 + i,)) for i in range(27)]
        for t in threads:
            t.start()
        for t in threads[:4] + threads[5:]:
            t.join(timeout=120)
        stop.set()
        threads[4].join(timeout=10)
        assert not any(t.is_alive() for t in threads), "a dispatch thread hangs"
    finally:
        sys.setswitchinterval(old_interval)
    assert problems[:5] == []
    # At rest, the installed selection is what the policy in force selects.
    tls.rng = None
    set_global_policy(DENY_CUDA)
    m.clear_failed_impls()
    assert layer.forward_oot(1) == "flagos"
    assert m.used_impls() == {"norm": "default.flagos"}


# --------------------------------------------------------------------------- fork


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_while_another_thread_resolves_does_not_hang_the_child():
    """A thread is inside an availability check (slow: importing a library, probing a device)
    when the process forks; the child resolves and calls the op on its own."""
    parent = os.getpid()
    entered, release = threading.Event(), threading.Event()

    def slow_check() -> bool:
        if os.getpid() == parent:
            entered.set()
            release.wait(30)
        return True

    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl(
                "norm",
                "default.flagos",
                "flagos",
                lambda self, x, residual=None: "flagos",
                available=Probe.all(slow_check),
            ),
            OpImpl("norm", "reference.torch", "reference", lambda self, x, residual=None: "ref"),
        ]
    )
    m = OpManager(reg)
    layer = layer_for(m)
    t = threading.Thread(target=layer.forward_oot, args=(1,))
    t.start()
    try:
        assert entered.wait(10)
        pid = os.fork()
        if pid == 0:  # child: report through the exit status only
            code = 1
            try:
                code = 0 if layer.forward_oot(1) == "flagos" else 2
                m.invalidate(reselect=True)
                code = code or (0 if layer.forward_oot(2) == "flagos" else 3)
            finally:
                os._exit(code)
        status = wait_or_kill(pid, timeout=20)
    finally:
        release.set()
        t.join(10)
    assert status == 0, "the forked child hung" if status is None else f"child exit {status}"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_mid_flip_children_dispatch_and_exit():
    """Threads flip the policy, fail and call the op while the main thread forks ten times; each
    child calls the op, re-selects, registers an impl, and exits within the timeout."""
    stop = threading.Event()
    policies = [PREFER_FLAGOS, PREFER_VENDOR, PREFER_REFERENCE, DENY_CUDA]

    def flagos(self, x, residual=None):
        if random.random() < 0.2:
            raise RuntimeError("error raised by default.flagos")
        return "flagos"

    def cuda(self, x, residual=None):
        return "cuda"

    def reference(self, x, residual=None):
        return "reference"

    m = OpManager(registry_of(flagos, cuda, reference))
    layer = layer_for(m)

    def flipper(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            set_global_policy(rng.choice(policies))

    def caller() -> None:
        while not stop.is_set():
            try:
                layer.forward_oot(1)
            except RuntimeError:
                pass
            m.clear_failed_impls()

    threads = [threading.Thread(target=flipper, args=(i,)) for i in range(3)]
    threads += [threading.Thread(target=caller) for _ in range(3)]
    for t in threads:
        t.start()
    statuses = []
    try:
        for _ in range(10):
            time.sleep(0.02)
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    layer.forward_oot(1)
                    m.invalidate(reselect=True)
                    m.clear_failed_impls()
                    m.registry.register_impl(
                        OpImpl("other", "reference.torch", "reference", lambda x: x)
                    )
                    code = 0 if m.call("other", 7) == 7 else 2
                except RuntimeError as exc:  # the injected failure everywhere is still fine
                    code = 0 if "error raised by" in str(exc) else 3
                finally:
                    os._exit(code)
            statuses.append(wait_or_kill(pid, timeout=20))
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert statuses == [0] * 10

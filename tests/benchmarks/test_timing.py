"""The benchmarks' timers and the statistics of their samples."""

from __future__ import annotations


from benchmarks import timing


def test_interleaved_medians_take_one_sample_of_each_per_round():
    calls: list[str] = []
    values = {"a": iter([5.0, 1.0, 3.0]), "b": iter([10.0, 30.0, 20.0])}

    def sampler(name):
        def sample():
            calls.append(name)
            return next(values[name])

        return sample

    assert timing.interleaved_medians([sampler("a"), sampler("b")], repeat=3) == [3.0, 20.0]
    assert calls == ["a", "b"] * 3


def test_wall_us_is_the_median_sample_per_call_and_syncs_around_each(monkeypatch):
    samples = iter([3.0, 1.0, 2.0])  # seconds per sample of 1000 calls
    monkeypatch.setattr(timing.timeit.Timer, "timeit", lambda self, number: next(samples))
    synced = []
    assert timing.wall_us(lambda: None, 1000, repeat=3, sync=lambda: synced.append(1)) == 2000.0
    assert len(synced) == 6


def test_wall_us_times_a_statement_in_a_namespace():
    seen = []
    assert timing.wall_us("seen.append(1)", 10, repeat=2, namespace={"seen": seen}) > 0
    assert len(seen) == 20


def test_bootstrap_interval_holds_the_median():
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    low, high = timing.bootstrap_median_ci(values)
    assert low <= timing.median(values) <= high


def test_kernel_us_falls_back_to_cuda_events_and_says_why(monkeypatch):
    def capture_fails(fn, graph=False):
        assert graph
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    monkeypatch.setattr(timing, "gpu_us", capture_fails)
    monkeypatch.setattr(timing, "events_us", lambda fn: 7.5)
    timed = timing.kernel_us(lambda: None)
    assert (timed.us, timed.method) == (7.5, "events")
    assert timed.note == (
        "graph capture failed: RuntimeError: operation not permitted when stream is capturing"
    )


def test_kernel_us_takes_the_graph_time_when_the_capture_works(monkeypatch):
    monkeypatch.setattr(timing, "gpu_us", lambda fn, graph=False: 3.0 if graph else 99.0)
    assert timing.kernel_us(lambda: None) == timing.KernelTime(3.0, "graph")


def test_describe_names_the_type_even_without_a_message():
    assert timing.describe(AssertionError()) == "AssertionError"
    assert timing.describe(ValueError("x" * 300), limit=5) == "ValueError: xxxxx"

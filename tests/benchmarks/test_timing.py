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

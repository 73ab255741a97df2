"""host_probe's CPU lists, as --pin takes them."""

from __future__ import annotations

from benchmarks import host_probe


def test_cpu_lists_take_ranges_and_single_cpus():
    assert host_probe.parse_cpus("0-3,8") == {0, 1, 2, 3, 8}
    assert host_probe.parse_cpus("4") == {4}
    assert host_probe.parse_cpus("2-2,2") == {2}

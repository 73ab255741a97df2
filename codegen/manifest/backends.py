"""The ``backends:`` section: where implementations live and when they are available."""

from __future__ import annotations

import re

from .. import model as m
from .reader import Reader
from ..yamlnodes import Entry

KEYS = ("kind", "vendor", "package", "priority", "requires", "device", "opaque", "probe")


def read_backends(r: Reader, entry: Entry) -> tuple[m.Backend, ...]:
    """Every backend, in manifest order; impl ids and packages are each used once."""
    node = r.map(entry.value, "backends", "a mapping of backend name -> settings")
    if not node.entries:
        raise r.error(entry.key_line, "backends is empty", "at least one backend")
    backends: list[m.Backend] = []
    impl_ids: dict[str, m.Backend] = {}
    packages: dict[str, m.Backend] = {}
    for item in node.entries.values():
        backend = _backend(r, item)
        other = impl_ids.get(backend.impl_id)
        if other is not None:
            raise r.error(
                backend.line,
                f"backend {backend.name!r} has impl id {backend.impl_id!r}, "
                f"already used by backend {other.name!r} (line {other.line})",
                "one flagos backend, one reference backend and distinct vendor names",
            )
        impl_ids[backend.impl_id] = backend
        other = packages.get(backend.package)
        if other is not None:
            raise r.error(
                backend.line,
                f"backend {backend.name!r} uses package {backend.package!r}, "
                f"already used by backend {other.name!r} (line {other.line})",
                "a package of its own for every backend",
            )
        packages[backend.package] = backend
        backends.append(backend)
    return tuple(backends)


def _backend(r: Reader, entry: Entry) -> m.Backend:
    name = r.key_ident(entry, "backend name")
    what = f"backend {name!r}"
    f = r.fields(entry.value, what, "a mapping with kind, package, priority, ...", KEYS)
    kind_entry = f.require("kind", " | ".join(m.KINDS))
    kind = r.ident(kind_entry.value, f"kind of {what}")
    if kind not in m.KINDS:
        raise r.error(kind_entry.value.line, f"kind of {what} is {kind!r}", " | ".join(m.KINDS))
    vendor_entry = f.pop("vendor")
    vendor = r.ident(vendor_entry.value, f"vendor of {what}") if vendor_entry else None
    if kind == "vendor" and vendor is None:
        raise r.error(
            entry.value.line, f"{what} has kind vendor but no 'vendor'", "vendor: <vendor name>"
        )
    if kind != "vendor" and vendor_entry is not None:
        raise r.error(
            vendor_entry.key_line,
            f"{what} has kind {kind} and a 'vendor'",
            "'vendor' only with kind: vendor",
        )
    package = r.dotted(f.require("package", "the Python package").value, f"package of {what}")
    priority = r.integer(f.require("priority", "an integer").value, f"priority of {what}")
    requires_entry = f.pop("requires")
    requires = r.modules(requires_entry.value, f"requires of {what}") if requires_entry else ()
    device_entry = f.pop("device")
    device = None
    if device_entry is not None:
        expected = f"a torch device type ({', '.join(m.DEVICES)}, ...)"
        device = r.scalar(device_entry.value, f"device of {what}", (str,), expected)
        assert isinstance(device, str)
        meant = m.NOT_DEVICES.get(device.lower())
        if meant is not None:
            raise r.error(
                device_entry.value.line,
                f"device of {what} is {device!r}, which is no torch device type",
                f"{expected}; {meant!r} for that chip",
            )
        if not re.fullmatch(r"[a-z][a-z0-9_]*", device):
            raise r.error(device_entry.value.line, f"device of {what} is {device!r}", expected)
    opaque_entry = f.pop("opaque")
    opaque = r.boolean(opaque_entry.value, f"opaque of {what}") if opaque_entry else False
    probe_entry = f.pop("probe")
    probe = r.ident(probe_entry.value, f"probe of {what}") if probe_entry else None
    f.done()
    assert device is None or isinstance(device, str)
    return m.Backend(
        name, kind, vendor, package, priority, requires, device, opaque, probe, entry.key_line
    )

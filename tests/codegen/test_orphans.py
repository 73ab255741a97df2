"""Impl code no op uses any more: `make codegen` warns, one line per function (file:line) or per
module, and deletes nothing."""

from __future__ import annotations

from tests.support.codegen_trees import snapshot_of

HELPER = (
    "warning: fxpkg/fast/impl/act.py:4: helper is not used by any op of backend 'fast' in "
    "ops.yaml, nor called by another impl (left in place)"
)


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning: ")]


def _drop(generated, line: str) -> None:
    manifest = generated / "ops.yaml"
    text = manifest.read_text()
    assert line in text
    manifest.write_text(text.replace(line, "", 1))


def test_an_impl_removed_from_ops_yaml_is_named_and_kept(generated, cli):
    # the fixture's fast backend has a public helper no op uses, from the start
    assert _warnings(cli("--root", generated)[2]) == [HELPER]
    _drop(generated, "      fast: act.scale_into\n")
    before = {k: v for k, v in snapshot_of(generated).items() if "/impl/" in k}
    rc, _, err = cli("--root", generated)
    assert rc == 0, err
    line = next(
        n
        for n, text in enumerate((generated / "fxpkg/fast/impl/act.py").read_text().splitlines(), 1)
        if text.startswith("def scale_into(")
    )
    assert _warnings(err) == [
        HELPER,
        f"warning: fxpkg/fast/impl/act.py:{line}: scale_into is not used by any op of backend "
        "'fast' in ops.yaml, nor called by another impl (left in place)",
    ]
    after = {k: v for k, v in snapshot_of(generated).items() if "/impl/" in k}
    assert after == before  # nothing deleted, nothing changed in impl code
    assert "scale_into" not in (generated / "fxpkg/fast/register_ops.py").read_text()
    assert cli("--root", generated, "--check")[0] == 0  # a warning, not an error


def test_a_module_no_op_uses_is_one_line(generated, cli):
    _drop(generated, "      fast: attention.pick_backend\n")
    rc, _, err = cli("--root", generated)
    assert rc == 0, err
    assert _warnings(err) == [
        HELPER,
        "warning: fxpkg/fast/impl/attention.py: no function of this module (pick_backend) is used "
        "by an op of backend 'fast' in ops.yaml or called by another impl (left in place)",
    ]
    assert (generated / "fxpkg/fast/impl/attention.py").exists()


def test_helpers_other_impls_call_are_not_orphans(generated, cli):
    impl = generated / "fxpkg/fast/impl"
    (impl / "util.py").write_text("def scale(x):\n    return x\n\n\ndef unused(x):\n    return x\n")
    (impl / "_private.py").write_text("def anything(x):\n    return x\n")
    act = impl / "act.py"
    act.write_text(
        act.read_text()
        + "\n\nfrom . import util as _util\nfrom fxpkg.fast.impl.norm import rms_norm as _norm\n\n\n"
        "def _use(x):\n    return _util.scale(helper(), _norm)\n"
    )
    rc, _, err = cli("--root", generated)
    assert rc == 0, err
    assert _warnings(err) == [
        "warning: fxpkg/fast/impl/util.py:5: unused is not used by any op of backend 'fast' in "
        "ops.yaml, nor called by another impl (left in place)"
    ]

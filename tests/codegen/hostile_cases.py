"""A corpus of hostile manifests, as an attacker or a careless user would write them.

Each case is the fixture manifest with one change (or a whole text). A rejected case names the
text on the line its error must point at (``anchor``; ``line`` for whole texts) and a fragment of
the message; an accepted case must produce safe code. ``CANARY`` in a payload is replaced by a
path the test checks: a payload that runs creates it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.codegen_trees import FIXTURES

VALID = (FIXTURES / "tree/ops.yaml").read_text()
PAYLOAD = '"""; __import__("os").system("touch CANARY"); """'


@dataclass(frozen=True)
class Hostile:
    id: str
    data: bytes
    message: str | None = None  # a fragment of the error; None: the manifest is accepted
    anchor: str | None = None  # text on the line the error names (its first occurrence)
    line: int | None = None  # or the line number itself

    @property
    def accepted(self) -> bool:
        return self.message is None

    def error_line(self) -> int | None:
        if self.line is not None:
            return self.line
        if self.anchor is None:
            return None
        text = self.data.decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if self.anchor in line:
                return number
        raise AssertionError(f"{self.id}: anchor {self.anchor!r} is on no line")


def mutate(old: str, new: str) -> str:
    assert VALID.count(old) == 1, f"{old!r} must occur once in the fixture manifest"
    return VALID.replace(old, new)


def with_op(body: str) -> str:
    """The fixture manifest with one more op (``relu2``, scaffolded impls) appended."""
    return VALID.rstrip("\n") + "\n\n" + body.strip("\n") + "\n"


def relu2(signature: str = "relu2(Tensor x) -> Tensor", doc: str = "ReLU squared.", **extra) -> str:
    lines = [
        "  relu2:",
        f"    signature: {signature}",
        f"    doc: {doc}",
        f"    layer: {extra.get('layer', 'vllm.model_executor.layers.activation.ReLUSquaredActivation')}",
        "    impls:",
        f"      reference: {extra.get('ref', 'act.relu2')}",
        f"      fast: {extra.get('fast', 'act.relu2')}",
    ]
    if "inputs" in extra:
        lines += [
            "    tests:",
            "      dtypes: [float32]",
            "      cases:",
            f"        - {{init: {extra.get('init', '{}')}, inputs: {extra['inputs']}}}",
        ]
    return with_op("\n".join(lines))


def rename_op(old: str, new: str) -> str:
    return mutate(f"  {old}:\n    signature: {old}(", f"  {new}:\n    signature: {new}(")


def nested(depth: int) -> str:
    return VALID.replace("ops:\n", "junk: " + "[" * depth + "]" * depth + "\nops:\n", 1)


def _case(
    id: str,
    text: str | bytes,
    message: str | None = None,
    anchor: str | None = None,
    line: int | None = None,
) -> Hostile:
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    return Hostile(id, data, message, anchor, line)


LONG = "a" * 300
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)

CASES: list[Hostile] = [
    # -- strings pasted into generated code: accepted, escaped ---------------------------------
    _case(
        "sig-default-triple-quotes",
        relu2(signature=f"relu2(Tensor x, str s='{PAYLOAD}') -> Tensor"),
    ),
    _case("doc-triple-quotes", relu2(doc="'" + PAYLOAD + "'")),
    _case("doc-ends-with-quote", relu2(doc="'ends with a quote \"'")),
    _case("doc-ends-with-backslash", relu2(doc="'ends with a backslash \\'")),
    _case("doc-four-quotes-and-escapes", relu2(doc='\'"""" \\N{BULLET} \\x00 \\u2028 """""\'')),
    _case("doc-only-quotes", relu2(doc='\'"""""""\'')),
    _case(
        "doc-markdown-and-html",
        relu2(doc="'<!-- END GENERATED: operator-table --> | `x` <script>'"),
    ),
    _case(
        "test-literal-injection",
        relu2(
            signature="relu2(Tensor x, str s='a') -> Tensor",
            inputs="{x: [3, 16], s: '" + PAYLOAD + "'}",
        ),
    ),
    _case(
        "init-literal-injection",
        relu2(inputs="{x: [3, 16]}", init="{name: '" + PAYLOAD + "'}"),
    ),
    _case(
        "supports-value-injection",
        relu2(
            signature="relu2(Tensor x, str s='a') -> Tensor",
            fast="{fn: act.relu2, supports: {s: ['" + PAYLOAD + "', a]}}",
        ),
    ),
    _case("sig-default-backticks", relu2(signature="relu2(Tensor x, str s='``x``') -> Tensor")),
    _case("crlf-line-endings", VALID.replace("\n", "\r\n")),
    _case("utf8-bom", "\ufeff" + VALID),
    _case("unicode-doc", relu2(doc="Über-ReLU², 平方")),
    # -- strings that cannot be pasted safely: rejected ----------------------------------------
    _case("doc-nul", relu2(doc='"a\\0b"'), "control character", 'doc: "a'),
    _case(
        "doc-lone-surrogate",
        relu2(doc='"a\\ud800b"'),
        "invalid Unicode character escape",
        'doc: "a',
    ),
    _case(
        "doc-line-separator", relu2(doc='"a\\u2028b"'), "non-printable character U+2028", "  relu2:"
    ),
    _case(
        "sig-default-nul",
        relu2(signature="\"relu2(Tensor x, str s='\\0') -> Tensor\""),
        "is not a literal",
        'signature: "relu2(',
    ),
    # whitespace in a signature is folded to one space, U+2028 included: harmless
    _case(
        "sig-default-line-separator",
        relu2(signature="\"relu2(Tensor x, str s='\\u2028') -> Tensor\""),
    ),
    _case(
        "impl-injection",
        mutate("fast: act.silu_and_mul", "fast: act.silu_and_mul;import os"),
        "expected module.function",
        "act.silu_and_mul;import os",
    ),
    _case(
        "package-injection",
        mutate("package: fxpkg.fast", "package: 'fxpkg.fast; import os'"),
        "is not a dotted Python name",
        "fxpkg.fast; import os",
    ),
    _case(
        "layer-injection",
        relu2(layer="'vllm.x.Y(); import os'"),
        "is not a dotted Python name",
        "vllm.x.Y()",
    ),
    _case(
        "requires-injection",
        mutate("requires: [math]", "requires: ['math; import os']"),
        "is not a dotted Python name",
        "math; import os",
    ),
    _case(
        "probe-injection",
        mutate("    opaque: true\n", "    opaque: true\n    probe: 'p()'\n"),
        "is not an identifier",
        "probe: 'p()'",
    ),
    _case(
        "dtype-injection",
        relu2(inputs="{x: {shape: [3], dtype: 'float32); import os'}}"),
        "dtype of input 'x'",
        "dtype: 'float32)",
    ),
    _case(
        "default-expression",
        relu2(signature="relu2(Tensor x, int n=__import__) -> Tensor"),
        "is not a literal",
        "signature: relu2(",
    ),
    # -- package paths that would write outside the package -----------------------------------
    _case(
        "package-torch",
        mutate("package: fxpkg.fast", "package: torch"),
        "top-level package",
        "  fast:",
    ),
    _case(
        "package-os-path",
        mutate("package: fxpkg.fast", "package: os.path"),
        "would create the top-level package 'os'",
        "  fast:",
    ),
    _case(
        "package-codegen",
        mutate("package: fxpkg.fast", "package: codegen.evil"),
        "inside the 'codegen' package",
        "  fast:",
    ),
    _case(
        "package-tests-generated",
        mutate("package: fxpkg.fast", "package: tests.generated"),
        "inside the 'tests' package",
        "  fast:",
    ),
    _case(
        "package-vllm-fl",
        mutate("package: fxpkg.fast", "package: vllm_fl"),
        "is a top-level package",
        "  fast:",
    ),
    _case(
        "package-in-generated-ops",
        mutate("package: fxpkg.fast", "package: vllm_fl.ops.fast"),
        "lies in vllm_fl/ops/",
        "  fast:",
    ),
    _case(
        "package-nested",
        mutate("package: fxpkg.vendor.acme", "package: fxpkg.fast.impl"),
        "lies inside package 'fxpkg.fast'",
        "  acme:",
    ),
    _case(
        "package-shadows-module",
        mutate("package: fxpkg.vendor.acme", "package: fxpkg.reference.impl.norm"),
        "would shadow the module fxpkg/reference/impl/norm.py",
        "  acme:",
    ),
    _case(
        "package-parent-dir",
        mutate("package: fxpkg.fast", "package: ../../etc"),
        "is not a dotted Python name",
        "package: ../../etc",
    ),
    _case(
        "package-same-twice",
        mutate("package: fxpkg.vendor.acme", "package: fxpkg.fast"),
        "already used by backend 'fast'",
        "  acme:",
    ),
    # -- outputs that collide ----------------------------------------------------------------
    _case(
        "layer-module-init",
        mutate("layers.activation.SiluAndMul", "__init__.SiluAndMul"),
        "dunder",
        "  silu_and_mul:",
    ),
    _case(
        "layer-class-dispatch-method",
        mutate("layers.activation.SiluAndMul", "layers.activation.dispatch_method"),
        "cannot be imported next to",
        "  silu_and_mul:",
    ),
    _case(
        "layer-class-private",
        mutate("layers.activation.SiluAndMul", "layers.activation._SiluAndMul"),
        "cannot be imported next to",
        "  silu_and_mul:",
    ),
    _case(
        "layer-class-is-other-fl",
        mutate("layers.layernorm.RMSNorm", "layers.activation.SiluAndMulFL"),
        "binds SiluAndMulFL in vllm_fl/ops/activation.py",
        "  rms_norm:",
    ),
    _case(
        "layer-same-class-twice",
        mutate("layers.layernorm.RMSNorm", "layers.activation.SiluAndMul"),
        "already replaced by op 'silu_and_mul'",
        "  rms_norm:",
    ),
    _case(
        "protocol-name-collision",
        rename_op("rms_norm", "siluAnd_mul"),
        "both make the class",
        "  siluAnd_mul:",
    ),
    _case(
        "impl-module-init",
        mutate("fast: act.silu_and_mul", "fast: __init__.silu_and_mul"),
        "dunder",
        "fast: __init__.silu_and_mul",
    ),
    _case(
        "impl-function-getattr",
        mutate("fast: act.silu_and_mul", "fast: act.__getattr__"),
        "dunder",
        "fast: act.__getattr__",
    ),
    _case(
        "eager-function-dunder",
        mutate(
            "fast: {fn: norm.rms_norm, eager: norm.rms_norm_inplace}",
            "fast: {fn: norm.rms_norm, eager: norm.__init__}",
        ),
        "dunder",
        "fast: {fn: norm.rms_norm, eager: norm.__init__}",
    ),
    _case(
        "probe-dunder",
        mutate("    opaque: true\n", "    opaque: true\n    probe: __path__\n"),
        "dunder",
        "  fast:",
    ),
    # -- names ---------------------------------------------------------------------------------
    _case("op-torch", rename_op("pick_backend", "torch"), "would shadow a name", "  torch:"),
    _case("op-init", rename_op("pick_backend", "__init__"), "dunder", "  __init__:"),
    _case("op-import", rename_op("pick_backend", "__import__"), "dunder", "  __import__:"),
    _case("op-private", rename_op("pick_backend", "_pick"), "starts with _", "  _pick:"),
    _case("op-register", rename_op("pick_backend", "register"), "would shadow", "  register:"),
    _case("op-available", rename_op("pick_backend", "available"), "would shadow", "  available:"),
    _case("op-len", rename_op("pick_backend", "len"), "would shadow", "  len:"),
    _case("op-OPS", rename_op("pick_backend", "OPS"), "would shadow", "  OPS:"),
    _case("op-keyword", rename_op("pick_backend", "class"), "is not an identifier", "  class:"),
    _case("op-300-chars", rename_op("pick_backend", LONG), "has 300 characters", f"  {LONG}:"),
    _case(
        "backend-300-chars",
        VALID.replace("  acme:", f"  {LONG}:").replace("      acme:", f"      {LONG}:"),
        "has 300 characters",
        f"  {LONG}:",
    ),
    _case(
        "package-part-300-chars",
        mutate("package: fxpkg.vendor.acme", f"package: fxpkg.{LONG}"),
        "has 300 characters",
        "  acme:",
    ),
    _case(
        "custom-op-kernel-meets-module-alias",
        relu2(signature="fast_relu2(Tensor x) -> Tensor", fast="relu2_kernel.fast_relu2").replace(
            "  relu2:", "  fast_relu2:"
        ),
        "are both named _fast_relu2_kernel",
        "      fast: relu2_kernel",
    ),
    _case("layer-11-parts", relu2(layer="a.b.c.d.e.f.g.h.i.j.K"), "has 11 parts", "  relu2:"),
    _case(
        "argument-len", relu2(signature="relu2(Tensor len) -> Tensor"), "would shadow", "  relu2:"
    ),
    _case(
        "argument-Exception",  # the trampolines' handler catches Exception
        relu2(signature="relu2(Tensor Exception) -> Tensor"),
        "would shadow",
        "  relu2:",
    ),
    _case(
        "argument-out",
        relu2(signature="relu2(Tensor out) -> Tensor"),
        "reserved name",
        "signature: relu2(",
    ),
    _case(
        "attribute-available",
        mutate("reads: {weight: Tensor,", "reads: {available: Tensor,"),
        "would shadow",
        "  rms_norm:",
    ),
    _case(
        "argument-unicode",
        relu2(signature="relu2(Tensor ẋ) -> Tensor"),
        "unexpected character",
        "signature: relu2(",
    ),
    # -- YAML that would not finish, or crash the parser ---------------------------------------
    _case("alias-bomb", BOMB + VALID, "anchor &a is not supported", line=1),
    _case("alias-self-reference", "a: &a [*a]\n" + VALID, "anchor &a is not supported", line=1),
    _case(
        "alias-to-package",
        mutate("package: fxpkg.fast", "package: &p fxpkg.fast"),
        "anchor &p",
        "package: &p",
    ),
    _case(
        "merge-key",
        mutate("  reference:\n    kind: reference\n", "  reference:\n    <<: {kind: reference}\n"),
        "merge keys (<<) are not supported",
        "<<: {kind",
    ),
    _case("nesting-500", nested(500), "nesting deeper than 32 levels", "junk:"),
    _case("nesting-60000", nested(60000), "nesting deeper than 32 levels", "junk:"),
    _case(
        "nesting-block",
        VALID.replace("ops:\n", "".join(f"{' ' * i}k{i}:\n" for i in range(40)) + "ops:\n", 1),
        "nesting deeper than 32 levels",
        "k32:",
    ),
    _case(
        "int-5000-digits",
        mutate("priority: 150", "priority: " + "9" * 5000),
        "out of range",
        "priority: 999",
    ),
    _case(
        "int-beyond-64-bits",
        mutate("priority: 150", "priority: 99999999999999999999"),
        "out of range",
        "priority: 9999",
    ),
    _case(
        "float-overflow",
        mutate("float32: {atol: 1.0e-5", "float32: {atol: 1.0e+400"),
        "not finite",
        "atol: 1.0e+400",
    ),
    _case(
        "atol-inf",
        mutate("float32: {atol: 1.0e-5", "float32: {atol: .inf"),
        "not finite",
        "atol: .inf",
    ),
    _case("rtol-nan", mutate("rtol: 1.3e-6", "rtol: .nan"), "not finite", "rtol: .nan"),
    _case(
        "atol-negative",
        mutate("float32: {atol: 1.0e-5", "float32: {atol: -1.0e-5"),
        "a non-negative number",
        "atol: -1.0e-5",
    ),
    _case(
        "op-atol-minus-inf", mutate("{atol: 1.0e-4,", "{atol: -.inf,"), "not finite", "atol: -.inf"
    ),
    _case("scalar-100k", relu2(doc="x" * 100_000), "a scalar of 100000 characters", "doc: xxx"),
    # -- tags ----------------------------------------------------------------------------------
    _case(
        "tag-apply-on-mapping",
        mutate(
            "    opaque: true\n",
            "    opaque: true\n    x: !!python/object/apply:os.system {args: ['touch CANARY']}\n",
        ),
        "unknown tag !!python/object/apply:os.system",
        "x: !!python",
    ),
    _case(
        "tag-apply-on-list",
        mutate("requires: [math]", "requires: !!python/object/apply:os.system ['touch CANARY']"),
        "unknown tag !!python/object/apply:os.system",
        "requires: !!python",
    ),
    _case(
        "tag-python-name",
        mutate("priority: 150", "priority: !!python/name:os.system"),
        "unknown tag",
        "priority: !!python",
    ),
    _case(
        "tag-binary",
        mutate("priority: 150", "priority: !!binary aGVsbG8="),
        "unknown tag !!binary",
        "priority: !!binary",
    ),
    _case(
        "tag-custom",
        mutate("priority: 150", "priority: !custom 150"),
        "unknown tag !custom",
        "priority: !custom",
    ),
    _case(
        "tag-set",
        mutate("requires: [math]", "requires: !!set {math}"),
        "unknown tag !!set",
        "requires: !!set",
    ),
    _case(
        "timestamp-doc", relu2(doc="2024-01-01"), "unsupported YAML value of type date", "doc: 2024"
    ),
    # -- odd bytes and documents ---------------------------------------------------------------
    _case(
        "non-utf8-byte",
        VALID.encode().replace(b"SwiGLU", b"Swi\xffGLU"),
        "are not UTF-8",
        "doc: Swi",
    ),
    _case(
        "latin1-doc",
        VALID.encode().replace(b"SwiGLU", "Swi\u00e9GLU".encode("latin-1")),
        "are not UTF-8",
        "doc: Swi",
    ),
    _case("nul-byte", VALID.replace("SwiGLU", "Swi\x00GLU"), "is not allowed", "doc: Swi"),
    _case("two-documents", VALID + "---\nops: {}\n", "expected a single document", "---"),
    _case(
        "tab-indent", mutate("    kind: flagos", "\tkind: flagos"), "invalid YAML", "\tkind: flagos"
    ),
    _case("top-level-list", "- backends\n- ops\n", "the manifest is a list", line=1),
    _case("only-comments", "# nothing\n# at all\n", "the manifest is empty", line=1),
    _case("integer-key", mutate("  pick_backend:", "  1:"), "mapping key is the integer 1", "  1:"),
    _case(
        "complex-key",
        mutate("  pick_backend:", "  ? [a, b]\n  :"),
        "mapping key is a list",
        "? [a, b]",
    ),
]

"""The one Jinja2 environment, its filters, generated-file headers and black formatting."""

from __future__ import annotations

import contextlib
import functools
import math
import re
import textwrap
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

import jinja2

from .errors import CodegenError
from .resources import TEMPLATES

# Assembled so that this source file is not itself marked as generated.
MARKER = "@" + "generated"
LINE_LENGTH = 100


def _pystr(value: object) -> str:
    """Text made safe inside a triple-double-quoted Python docstring: backslashes doubled, every
    quote of a run of three escaped, a final quote escaped (it would join the closing quotes).
    Apply it last, after any wrapping, so nothing can split an escape."""
    text = str(value).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if text.endswith('"'):
        body = text[:-1]
        if (len(body) - len(body.rstrip("\\"))) % 2 == 0:  # an odd run: escaped already
            text = body + '\\"'
    return text


def _docwrap(text: str, indent: int) -> str:
    """Docstring text wrapped to the line length at ``indent`` (the opening quotes included)."""
    paragraphs = [" ".join(p.split()) for p in text.strip().split("\n\n")]
    wrapped = [
        textwrap.fill(
            p,
            LINE_LENGTH,
            initial_indent=" " * (indent + 3),
            subsequent_indent=" " * indent,
            break_on_hyphens=False,
        ).lstrip()
        for p in paragraphs
    ]
    return ("\n\n" + " " * indent).join(wrapped)


def _pyrepr(value: object) -> str:
    """A Python literal for a manifest value (str, int, float, bool, None, tuples of these)."""
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_pyrepr(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_pyrepr(k)}: {_pyrepr(v)}" for k, v in value.items()) + "}"
    assert value is None or isinstance(value, (str, int, float, bool)), type(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


def _mdcode(text: object) -> str:
    """A Markdown code span holding ``text`` verbatim, whatever backticks it contains."""
    text = str(text).replace("\n", " ")
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _mdcell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0]


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(
        pystr=_pystr,
        docwrap=_docwrap,
        pyrepr=_pyrepr,
        mdcell=_mdcell,
        mdcode=_mdcode,
        first_line=_first_line,
    )
    return env


#: (manifest, command) named by the headers of the tree being generated: the plugin's by default
_SOURCE: ContextVar[tuple[str, str, str]] = ContextVar(
    "source", default=("ops.yaml", "", "make codegen")
)


@contextlib.contextmanager
def generated_from(manifest: str, also: str, command: str) -> Iterator[None]:
    """Headers rendered inside say they come from ``manifest`` (and ``also``) and that
    ``command`` regenerates them (an out-of-tree vendor package: its manifest, the plugin's
    ops.yaml and ``vllm-fl generate``)."""
    token = _SOURCE.set((manifest, also, command))
    try:
        yield
    finally:
        _SOURCE.reset(token)


def header(template: str, suffix: str) -> str:
    """The generated-file header for a file of type ``suffix`` rendered from ``template``."""
    manifest, also, command = _SOURCE.get()
    lines = [
        f"{MARKER} by `{command}` from {manifest}{also} and templates/{template}.",
        f"Do not edit: change {manifest} or the template, then run `{command}`.",
    ]
    if suffix == ".md":
        return "<!-- " + " ".join(lines) + " -->\n"
    return "".join(f"# {line}\n" for line in lines)


def render(template: str, **context: object) -> str:
    return environment().get_template(template).render(**context)


def render_file(template: str, path: str, **context: object) -> str:
    """Render ``template`` for output ``path``: header first, Python black-formatted."""
    suffix = Path(path).suffix
    text = header(template, suffix) + render(template, **context)
    return format_python(text, path) if suffix == ".py" else text


def format_python(text: str, path: str = "<generated>") -> str:
    import black

    mode = black.Mode(line_length=LINE_LENGTH, target_versions={black.TargetVersion.PY311})
    try:
        return black.format_str(text, mode=mode)
    except black.InvalidInput as exc:  # the loader should make this impossible: a generator bug
        raise CodegenError(
            path,
            None,
            f"generated code does not parse ({exc})",
            "valid Python: report this generator bug with the manifest",
        ) from None

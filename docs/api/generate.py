"""Generate the API reference (``docs/api/*.md``) from the docstrings.

    python docs/api/generate.py            # rewrite the pages
    python docs/api/generate.py --check    # exit 1, naming the stale pages, if any is out of date

One page per public package: every name in its ``__all__`` (in that order) with its
signature and docstring, and for a class the public methods and properties it defines
itself. ``tests/docs/test_api_reference.py`` runs the check, so a docstring or
signature that changes without the pages being regenerated fails the test suite.

Why this and not ``pydoc`` or ``mkdocstrings``: ``pydoc`` writes plain text or HTML, not
Markdown, and its output holds absolute source paths and every inherited member, so it
differs between checkouts; ``mkdocstrings`` needs MkDocs, a theme and a site build,
dependencies the project does not otherwise have. This is ``inspect`` and about a hundred
lines, and its output depends only on the sources.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# page name -> the modules it documents (the first one's docstring opens the page)
PAGES: dict[str, list[str]] = {
    "passinfra": ["passinfra"],
    "passinfra.ir": ["passinfra.ir"],
    "passinfra.ir.op": ["passinfra.ir.op", "passinfra.ir.op.nn", "passinfra.ir.op.random"],
    "passinfra.transform": ["passinfra.transform"],
    "passinfra.instrument": ["passinfra.instrument"],
    "passinfra.frontend": ["passinfra.frontend"],
    "passinfra.runtime": ["passinfra.runtime"],
    "scheduler": ["scheduler"],
    "scheduler.pool": ["scheduler.pool"],
}

HEADER = "<!-- Generated from the docstrings by docs/api/generate.py; do not edit. -->"


class ReferenceError_(Exception):
    """Something in the sources the generator cannot render deterministically."""


def _annotation(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return ""
    if isinstance(value, str):  # `from __future__ import annotations`: already source text
        return value
    if isinstance(value, type):
        return value.__qualname__
    return repr(value).replace("typing.", "")


def _default(value: Any, where: str) -> str:
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    text = repr(value)
    if " at 0x" in text:  # an object's address: would differ from run to run
        raise ReferenceError_(f"{where}: the default {text} has no stable repr")
    return text


def signature(obj: Any, where: str, drop_self: bool = False) -> str:
    """``(a: int, b: str = 'x') -> T`` with annotations as written in the source (a
    class: its constructor's parameters, without the ``-> None``)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    parts = []
    previous_kind = None
    params = list(sig.parameters.values())
    if drop_self and params and params[0].name in ("self", "cls"):
        params = params[1:]
    for param in params:
        starts_keywords = previous_kind not in (param.KEYWORD_ONLY, param.VAR_POSITIONAL)
        if param.kind is param.KEYWORD_ONLY and starts_keywords:
            parts.append("*")
        if previous_kind is param.POSITIONAL_ONLY and param.kind is not param.POSITIONAL_ONLY:
            parts.append("/")
        prefix = {param.VAR_POSITIONAL: "*", param.VAR_KEYWORD: "**"}.get(param.kind, "")
        text = prefix + param.name
        annotation = _annotation(param.annotation)
        if annotation:
            text += f": {annotation}"
        if param.default is not param.empty:
            text += (" = " if annotation else "=") + _default(param.default, where)
        parts.append(text)
        previous_kind = param.kind
    if previous_kind is inspect.Parameter.POSITIONAL_ONLY:
        parts.append("/")
    returned = "" if inspect.isclass(obj) else _annotation(sig.return_annotation)
    return f"({', '.join(parts)})" + (f" -> {returned}" if returned else "")


def _doc(obj: Any) -> list[str]:
    """The docstring as a paragraph of lines (none for an object without one)."""
    doc = obj.__doc__ if inspect.isclass(obj) else inspect.getdoc(obj)  # a class: never object's
    return [inspect.cleandoc(doc), ""] if doc and doc.strip() else []


def _members(cls: type) -> list[tuple[str, Any]]:
    """The public methods and properties ``cls`` defines itself, in definition order."""
    found = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            found.append((name, value.__func__))
        elif isinstance(value, property) or inspect.isfunction(value):
            found.append((name, value))
    return found


def _render_class(name: str, cls: type, lines: list[str]) -> None:
    bases = [base.__name__ for base in cls.__bases__ if base is not object]
    heading = f"class {name}" + (f"({', '.join(bases)})" if bases else "")
    if issubclass(cls, BaseException):
        lines += [f"### `{heading}`", "", *_doc(cls)]
        return
    lines += [f"### `{heading}`", "", f"`{name}{signature(cls, name)}`", "", *_doc(cls)]
    for member, value in _members(cls):
        if isinstance(value, property):
            lines += [f"#### `{name}.{member}` (property)", "", *_doc(value)]
        else:
            sig = signature(value, f"{name}.{member}", drop_self=True)
            lines += [f"#### `{name}.{member}{sig}`", "", *_doc(value)]


def render_module(module_name: str, lines: list[str], first: bool) -> None:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        raise ReferenceError_(f"{module_name} has no __all__: its public names are not declared")
    if first:
        lines += [f"# `{module_name}`", "", HEADER, "", *_doc(module)]
    else:
        lines += [f"## `{module_name}`", "", *_doc(module)]
    for name in names:
        obj = getattr(module, name)
        where = f"{module_name}.{name}"
        if inspect.ismodule(obj):
            lines += [f"### `{name}`", "", f"The module `{obj.__name__}`.", ""]
        elif inspect.isclass(obj):
            _render_class(name, obj, lines)
        elif callable(obj):
            lines += [f"### `{name}{signature(obj, where)}`", "", *_doc(obj)]
        else:
            lines += [f"### `{name}`", "", f"`{name} = {_default(obj, where)}`", ""]


def render_page(page: str) -> str:
    lines: list[str] = []
    for index, module_name in enumerate(PAGES[page]):
        render_module(module_name, lines, first=index == 0)
    return "\n".join(lines).rstrip() + "\n"


def render_index() -> str:
    lines = ["# API reference", "", HEADER, "",
             "One page per package, generated from the docstrings of its public names (`__all__`).",
             ""]
    lines += [f"- [`{page}`]({page}.md)" for page in PAGES]
    return "\n".join(lines) + "\n"


def expected_pages() -> dict[Path, str]:
    pages = {HERE / f"{page}.md": render_page(page) for page in PAGES}
    pages[HERE / "index.md"] = render_index()
    return pages


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    pages = expected_pages()
    if "--check" in argv:
        stale = [path.name for path, text in pages.items() if not path.exists() or path.read_text() != text]
        if stale:
            print(f"out of date: {', '.join(stale)}; run `python docs/api/generate.py`")
            return 1
        return 0
    for path, text in pages.items():
        path.write_text(text)
    print(f"wrote {len(pages)} pages to {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

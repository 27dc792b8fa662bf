"""A Griffe extension for the API reference: Sphinx cross-reference roles become links.

snowshard's docstrings name other objects with Sphinx roles (``:class:`Snowflake```,
``:func:`~snowshard.gene_of```, ``:mod:`~.merge```), which mkdocstrings leaves as text.
This extension, loaded by ``mkdocs.yml``, rewrites each role into an *optional*
mkdocs-autorefs reference: a link when the target is documented on the site, the name as
code otherwise, never a warning. Targets are resolved as Sphinx does: absolute dotted
paths as they are, a leading ``.`` from the current module upward, and bare names in the
scope of the documented object (its members, its module's names and imports). ``~`` shows
the last part only; ``:func:`` and ``:meth:`` add ``()``.
"""

from __future__ import annotations

import html
import re
from typing import Any

from griffe import Extension, GriffeLoader, NameResolutionError, Object

__all__ = ["SphinxRoles"]

ROLE = re.compile(
    r":(?:py:)?(?P<role>class|func|meth|attr|mod|data|exc|obj|const):`(?P<body>[^`]+)`"
)
EXPLICIT_TITLE = re.compile(r"(?P<title>.+?)\s*<(?P<target>[^<>]+)>")
CALLABLE_ROLES = {"func", "meth"}


class SphinxRoles(Extension):
    """Rewrite the Sphinx roles of every docstring once the package is loaded."""

    def on_object(self, *, obj: Object, loader: GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        obj.docstring.value = ROLE.sub(lambda match: reference(obj, match), obj.docstring.value)


def reference(obj: Object, match: re.Match[str]) -> str:
    """The autorefs reference for one role found in the docstring of ``obj``."""
    body = match["body"].strip()
    explicit = EXPLICIT_TITLE.fullmatch(body)
    target = explicit["target"] if explicit else body
    short = target.startswith("~")
    target = target.lstrip("~")
    if explicit:
        title = explicit["title"]
    else:
        title = target.lstrip(".").rsplit(".", 1)[-1] if short else target.lstrip(".")
        if match["role"] in CALLABLE_ROLES and not title.endswith(")"):
            title += "()"
    identifier = resolve(obj, target)
    return (
        f'<autoref identifier="{html.escape(identifier)}" optional>'
        f"<code>{html.escape(title)}</code></autoref>"
    )


def resolve(obj: Object, target: str) -> str:
    """The full dotted path ``target`` names in the docstring of ``obj`` (best effort)."""
    if target.startswith("."):
        module = obj.module
        relative = target.lstrip(".")
        candidates = [module.path, *parents(module.path)]
        for base in candidates:
            path = f"{base}.{relative}"
            if exists(obj, path):
                return path
        return f"{module.path}.{relative}"
    first, _, rest = target.partition(".")
    try:
        found = obj.resolve(first)
    except NameResolutionError:
        return target  # an absolute path, or a name this scope does not know
    return f"{found}.{rest}" if rest else found


def parents(path: str) -> list[str]:
    """``a.b.c`` -> ``["a.b", "a"]``."""
    parts = path.split(".")
    return [".".join(parts[:end]) for end in range(len(parts) - 1, 0, -1)]


def exists(obj: Object, path: str) -> bool:
    """Whether the loaded packages hold an object at ``path``."""
    try:
        obj.modules_collection.get_member(path)
    except (KeyError, ValueError):
        return False
    return True

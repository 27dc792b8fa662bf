"""How sharded operations are written into revisions, and the imports a revision needs.

A sharded operation renders as the Alembic operation it wraps, renamed and with its spec
in the place of the table: ``op.add_column('__snowshard_table__', ...)`` becomes
``op.add_sharded_column(ShardSpec('orders', 16), ...)``, and the revision imports
``from snowshard.spec import ShardSpec``.

Alembic renders a column type that is not SQLAlchemy's by its module path
(``snowshard.orm.types.SnowflakeType()``) without importing it; :func:`imports_for` finds
the ``import snowshard.orm.types`` (and the like) a revision needs.
"""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import render_op_text
from alembic.autogenerate.api import AutogenContext
from alembic.operations import ops as alembic_ops
from alembic.runtime.migration import MigrationContext

from snowshard._compat import register_renderer
from snowshard.migrations.naming import SENTINEL_TABLE
from snowshard.migrations.ops import SHARDED_OPERATIONS, ShardedOperation
from snowshard.spec import DEFAULT_DATABASE, ShardConfigError, ShardSpec

__all__ = ["autogen_context_for", "imports_for", "render_spec"]

_SPEC_IMPORT = "from snowshard.spec import ShardSpec"


def render_spec(spec: ShardSpec) -> str:
    """``spec`` as Python source: ``ShardSpec('orders', 16, databases={...})``."""
    if not isinstance(spec, ShardSpec):
        raise ShardConfigError(
            f"render_spec needs a snowshard.spec.ShardSpec, got {type(spec).__name__} {spec!r}"
        )
    args = [repr(spec.name), repr(spec.count)]
    if spec.pattern != ShardSpec(spec.name, spec.count).pattern:
        args.append(f"pattern={spec.pattern!r}")
    if set(spec.databases) != {DEFAULT_DATABASE}:
        parts = []
        for key, indices in spec.databases.items():
            seq = list(indices)
            if seq and seq == list(range(seq[0], seq[-1] + 1)):
                start = f"{seq[0]}, " if seq[0] else ""
                parts.append(f"{key!r}: range({start}{seq[-1] + 1})")
            else:
                parts.append(f"{key!r}: {tuple(seq)!r}")
        args.append("databases={" + ", ".join(parts) + "}")
    return f"ShardSpec({', '.join(args)})"


def _render_sharded(autogen_context: AutogenContext, op: ShardedOperation) -> str:
    """Render the wrapped Alembic operation, then name the sharded one and its spec."""
    text = render_op_text(autogen_context, op.template)
    plain = op.op_name.replace("_sharded", "")
    head = f"{plain}("
    spec = render_spec(op.spec)
    sentinel = repr(SENTINEL_TABLE)
    if head not in text or sentinel not in text:
        raise ValueError(f"cannot render {op!r}: unexpected alembic output {text!r}")
    autogen_context.imports.add(_SPEC_IMPORT)
    text = text.replace(head, f"{op.op_name}(", 1)
    if f"table_name={sentinel}" in text:
        return text.replace(f"table_name={sentinel}", f"spec={spec}", 1)
    return text.replace(sentinel, spec, 1)


def _register_renderers() -> None:
    for cls in SHARDED_OPERATIONS.values():
        register_renderer(cls, _render_sharded)


_register_renderers()


def autogen_context_for(context: MigrationContext, **opts: Any) -> AutogenContext:
    """An AutogenContext rendering as env.py's does (defaults for contexts made by hand)."""
    merged = {
        "alembic_module_prefix": "op.",
        "sqlalchemy_module_prefix": "sa.",
        "user_module_prefix": None,
        "render_item": None,
        **context.opts,
        **opts,
    }
    return AutogenContext(context, opts=merged, autogenerate=False)


_NOT_IMPORTED = ("sqlalchemy", "builtins", "__main__")


def imports_for(context: MigrationContext, script: alembic_ops.MigrationScript) -> set[str]:
    """``import <module>`` for every type the script renders by its module path.

    Alembic renders a type that is not SQLAlchemy's as ``<module>.<repr>`` (with the default
    ``user_module_prefix=None``) and imports nothing for it. The script is rendered once here
    with a ``render_item`` hook (wrapping the environment's own) noting those types; a
    module is imported when its path shows up in what was rendered.
    """
    if context.opts.get("user_module_prefix") is not None:
        return set()  # the environment chose how such types are spelled and imported
    user_render = context.opts.get("render_item")
    seen: set[str] = set()

    def note(type_: str, obj: Any, autogen_context: AutogenContext) -> Any:
        rendered = user_render(type_, obj, autogen_context) if user_render else False
        if rendered is False and type_ == "type":
            module = type(obj).__module__
            if module.split(".")[0] not in _NOT_IMPORTED and module.isascii():
                seen.add(module)
        return rendered

    rendering = autogen_context_for(context, render_item=note)
    imports: set[str] = set()
    for container in (*script.upgrade_ops_list, *script.downgrade_ops_list):
        for op in container.ops:
            seen.clear()
            try:
                text = render_op_text(rendering, op)
            except Exception:  # noqa: BLE001, S112 - rendered for real later, which reports it
                continue
            imports.update(f"import {module}" for module in seen if f"{module}." in text)
    return imports

"""Loader criteria (``with_loader_criteria()``) on sharded models: refused, before any SQL.

``with_loader_criteria(Order, Order.deleted.is_(False))`` asks the ORM to add a condition
wherever ``Order`` is loaded. A sharded statement loads ``Order``'s physical classes
(``Order_00`` ..), concrete subclasses that SQLAlchemy's loader criteria do not reach, and
the UNION ALL entity that reads several tables at once is an alias they skip: the
condition would be silently left out, returning (or changing) rows it excludes. So a
statement whose loader criteria apply to a sharded model it names (the model itself, or
a mixin or base class of it) raises
:class:`~snowshard.sharding.errors.UnsupportedShardQuery`; criteria for other entities
(an unsharded model joined in) apply as usual.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy.orm import LoaderCriteriaOption

from snowshard.sharding.errors import UnsupportedShardQuery
from snowshard.sharding.model import ShardedModel

__all__ = ["check_loader_criteria"]


def _root_class(option: LoaderCriteriaOption) -> Any:
    """The class an option's criteria apply to (with its subclasses)."""
    if option.root_entity is not None:
        return option.root_entity
    return getattr(option.entity, "class_", None)


def check_loader_criteria(options: Iterable[Any], models: Iterable[ShardedModel]) -> None:
    """Raise :class:`UnsupportedShardQuery` if one of ``options`` is a loader criteria
    option that applies to one of ``models`` (module docstring)."""
    for option in options:
        if not isinstance(option, LoaderCriteriaOption):
            continue
        root = _root_class(option)
        for model in models:
            if isinstance(root, type) and (
                issubclass(model.cls, root) or root in model.classes
            ):
                raise UnsupportedShardQuery(
                    f"with_loader_criteria({root.__name__}, ...) applies to the sharded "
                    f"model {model.name}, whose rows are read as its physical classes "
                    f"({model.classes[0].__name__} ..), which loader criteria do not "
                    "reach: the condition would be left out. Put it in the statement's "
                    f"WHERE clause instead: select({model.name}).where(...)"
                )

"""What an ID source must offer to fill a column default: the :class:`IdIssuer` protocol.

:class:`~snowshard.Snowflake` (IDs made in this process) and
:class:`~snowshard.redis_issuer.RedisIssuer` (sequences kept in Redis) both satisfy it, and so
does any object with a ``layout`` and a ``next_id(gene=None)``::

    from snowshard.orm import snowflake_pk
    from snowshard.redis_issuer import RedisIssuer

    ids = RedisIssuer("redis://cache:6379/0", Layout(gene_bits=4), worker=2)

    class Order(Base):
        __tablename__ = "orders"
        id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from snowshard.errors import IssuerTypeError
from snowshard.layout import Layout
from snowshard.redaction import redact_url

__all__ = ["IdIssuer", "IssuerTypeError", "check_issuer"]


@runtime_checkable
class IdIssuer(Protocol):
    """Issues unique, increasing IDs of one :class:`~snowshard.Layout`.

    ``next_id()`` returns the next ID; ``next_id(gene=key)`` one whose low
    ``layout.gene_bits`` bits are ``gene_of(key, layout.gene_bits)``, and raises
    :class:`~snowshard.LayoutError` when the layout has no gene bits.
    """

    @property
    def layout(self) -> Layout: ...

    def next_id(self, gene: object = None) -> int: ...


def check_issuer(issuer: object, what: str = "issuer") -> IdIssuer:
    """``issuer`` itself if it satisfies :class:`IdIssuer`, else :class:`IssuerTypeError`.

    Checks that ``layout`` is a :class:`~snowshard.Layout` and ``next_id`` is callable,
    so a wrong object fails where it is passed, not at the first insert.
    """
    layout = getattr(issuer, "layout", None)
    next_id = getattr(issuer, "next_id", None)
    if isinstance(issuer, IdIssuer) and isinstance(layout, Layout) and callable(next_id):
        return issuer
    missing = [
        name
        for name, ok in (
            ("a layout (a snowshard.Layout)", isinstance(layout, Layout)),
            ("a next_id(gene=None) method", callable(next_id)),
        )
        if not ok
    ]
    raise IssuerTypeError(
        f"{what} must be an ID issuer (snowshard.issuer.IdIssuer: a snowshard.Snowflake, a "
        "RedisIssuer, or any object with a layout and next_id(gene=None)); got "
        f"{type(issuer).__name__} {redact_url(repr(issuer))}, which lacks "
        f"{' and '.join(missing)}"
    )

"""Keeping secrets out of messages: URLs with their passwords masked as ``***``.

Every ``repr``, error message and log line of snowshard that may show a connection URL
passes it (or the whole message) through :func:`redact_url`; SQLAlchemy URLs go through
:func:`redact_sqlalchemy_url`. The rules of :func:`redact_url`, applied to each
whitespace-separated word of the text:

* **user info**: ``scheme://user:PASSWORD@host`` and ``scheme://:PASSWORD@host`` become
  ``scheme://user:***@host`` and ``scheme://:***@host``. The user info ends at the last
  ``@`` before the URL's query (``?``), fragment (``#``) or end, so a raw ``@``, ``/`` or
  ``:`` in a password is masked too. A user name alone (``scheme://user@host``) is kept.
  A word without ``scheme://`` (a malformed URL such as ``postgresql//user:pw@host``) is
  read the same way from its start: ``user:***@host``.
* **query parameters** (anywhere in the text, not only in URLs): the value of a
  parameter whose name, compared case-insensitively with ``-`` read as ``_``, is
  ``pass``, ``pwd``, ``auth``, ``token`` or ``secret``, contains ``password``,
  ``passwd`` or ``secret``, or ends in ``_pwd``, ``_pass``, ``_auth``, ``_token``,
  ``_key`` or ``apikey`` (``password=``, ``PASSWORD=``, ``passwd=``, ``pwd=``,
  ``auth=``, ``ssl_password=``, ``api_key=``, ...) becomes ``***``: ``?password=***``.
  The name is kept; the value ends at ``&``, ``;``, ``#`` or whitespace.

Percent-encode a ``?``, ``#`` or whitespace in a password (as URLs require): a raw one
ends the user info early. :func:`scrub` additionally replaces known secret strings
(from :func:`url_secrets`) anywhere in a text, for driver messages of unknown shape.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, unquote

__all__ = [
    "MASK",
    "is_secret_name",
    "redact_sqlalchemy_url",
    "redact_url",
    "scrub",
    "url_secrets",
]

MASK = "***"

_TOKEN = re.compile(r"\S+")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
# name=value where name starts the text or follows a separator
_PARAM = re.compile(r"(?P<lead>^|[?&;\s,(])(?P<name>[A-Za-z0-9_.%\-]+)=(?P<value>[^&;#\s]*)")
_SECRET_EXACT = frozenset({"pass", "pwd", "auth", "token", "secret", "apikey"})
_SECRET_PARTS = ("password", "passwd", "secret")
_SECRET_ENDS = ("_pwd", "_pass", "_auth", "_token", "_key", "apikey")
# secrets shorter than this are masked where they stand in a URL, not replaced everywhere
_MIN_SCRUB = 4


def is_secret_name(name: str) -> bool:
    """Whether a query parameter (or keyword) called ``name`` holds a secret."""
    key = unquote(name).strip().lower().replace("-", "_")
    return (
        key in _SECRET_EXACT
        or any(part in key for part in _SECRET_PARTS)
        or key.endswith(_SECRET_ENDS)
    )


def _password_span(token: str) -> tuple[int, int] | None:
    """Where the password of the user info in ``token`` (no whitespace) is, or None.

    With a ``scheme://``, the user info follows it; without one (a malformed URL such as
    ``postgresql//user:pw@host``), it starts the token. Either way it ends at the last
    ``@`` before the query or fragment, and the password follows its first ``:``.
    """
    found = _SCHEME.search(token)
    begin = found.end() if found is not None else 0
    end = len(token)
    for stop in ("?", "#"):
        index = token.find(stop, begin)
        if index != -1:
            end = min(end, index)
    at = token.rfind("@", begin, end)
    if at == -1:
        return None
    colon = token.find(":", begin, at)
    if colon == -1:
        return None
    return colon + 1, at


def _mask_token(match: re.Match[str]) -> str:
    token = match.group(0)
    span = _password_span(token)
    if span is None:
        return token
    return f"{token[:span[0]]}{MASK}{token[span[1]:]}"


def _mask_param(match: re.Match[str]) -> str:
    if not is_secret_name(match.group("name")) or not match.group("value"):
        return match.group(0)
    return f"{match.group('lead')}{match.group('name')}={MASK}"


def redact_url(text: str) -> str:
    """``text`` (a URL or a message containing URLs) with every password masked as ``***``.

    ``redis://:pw@host/0`` -> ``redis://:***@host/0``;
    ``unix:///tmp/redis.sock?password=pw&db=1`` -> ``unix:///tmp/redis.sock?password=***&db=1``.
    See the module's documentation for the rules.
    """
    text = str(text)
    text = _TOKEN.sub(_mask_token, text)
    return _PARAM.sub(_mask_param, text)


def redact_sqlalchemy_url(url: Any) -> str:
    """A SQLAlchemy URL (a string or ``sqlalchemy.engine.URL``) with its passwords masked.

    Uses SQLAlchemy's ``render_as_string(hide_password=True)``, which hides the password
    of the user info only, then :func:`redact_url` for ``?password=`` and the like. A
    string SQLAlchemy cannot parse is redacted by :func:`redact_url` alone.
    """
    # imported here, not at the top: snowshard's core must not need SQLAlchemy
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        rendered = make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, TypeError, ValueError):
        rendered = str(url)
    return redact_url(rendered)


def url_secrets(url: Any) -> frozenset[str]:
    """The secrets in ``url``: its password and secret query values, raw and decoded.

    ``url`` is a URL string or an object with ``password`` and ``query`` attributes (a
    ``sqlalchemy.engine.URL``). Used by :func:`scrub` on driver messages.
    """
    found: set[str] = set()
    if not isinstance(url, str):
        password = getattr(url, "password", None)
        if password:
            found.add(str(password))
        query = getattr(url, "query", None) or {}
        for name, value in query.items():
            if is_secret_name(str(name)):
                values = value if isinstance(value, tuple) else (value,)
                found.update(str(v) for v in values if v)
    else:
        text = str(url)
        for match in _TOKEN.finditer(text):
            span = _password_span(match.group(0))
            if span is not None and span[1] > span[0]:
                found.add(match.group(0)[span[0]:span[1]])
        for match in _PARAM.finditer(text):
            if is_secret_name(match.group("name")) and match.group("value"):
                found.add(match.group("value"))
        query_text = text.partition("?")[2].partition("#")[0]
        for name, value in parse_qsl(query_text, keep_blank_values=False):
            if is_secret_name(name) and value:
                found.add(value)
    return frozenset(found | {unquote(secret) for secret in found})


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """:func:`redact_url` of ``text``, then every secret of 4+ characters replaced by ``***``."""
    text = redact_url(text)
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= _MIN_SCRUB:
            text = text.replace(secret, MASK)
    return text

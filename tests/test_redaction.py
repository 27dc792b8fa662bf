"""No secret in any message: the URL redaction helper, and every lease, issuer and CLI path."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from snowshard import ConfigurationError, Layout, Snowflake, SnowshardError
from snowshard.redaction import redact_sqlalchemy_url, redact_url, scrub, url_secrets
from snowshard.redis_issuer import IssuerUnavailable, RedisIssuer
from snowshard.workers import (
    DatabaseLease,
    LeaseBackendError,
    RedisLease,
    WorkerConfigError,
    WorkerIdsExhausted,
    create_table,
    join_cluster,
)
from tests.backends import DatabaseFactory
from tests.cli_support import run
from tests.faults.servers import RedisServer

PW = "S3cr3t-Sn0wsh4rd-pw"
TWO = Layout(worker_bits=1)

# -------------------------------------------------------------------------- the helper

REDACTIONS = [
    # user info
    ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
    ("redis://user:pw@host/0", "redis://user:***@host/0"),
    ("rediss://:pw@h:6380/0?ssl_ca_certs=/ca.pem", "rediss://:***@h:6380/0?ssl_ca_certs=/ca.pem"),
    ("redis://default:p@ss:w/rd@host/0", "redis://default:***@host/0"),
    ("redis://user@host/0", "redis://user@host/0"),
    ("redis://host:6379/0", "redis://host:6379/0"),
    ("redis://[::1]:6379/0", "redis://[::1]:6379/0"),
    ("postgresql+psycopg://app:pw@db:5432/app", "postgresql+psycopg://app:***@db:5432/app"),
    ("postgresql//app:pw@db/app", "postgresql//app:***@db/app"),
    # query parameters, any case, the name kept
    ("redis://host/0?password=pw", "redis://host/0?password=***"),
    ("redis://host/0?PassWord=pw&db=1", "redis://host/0?PassWord=***&db=1"),
    ("unix:///tmp/redis.sock?password=pw", "unix:///tmp/redis.sock?password=***"),
    ("unix:///tmp/redis.sock?db=2&password=pw", "unix:///tmp/redis.sock?db=2&password=***"),
    ("mysql://root@db/a?passwd=pw;charset=utf8", "mysql://root@db/a?passwd=***;charset=utf8"),
    ("redis://host/0?pwd=a&auth=b#frag", "redis://host/0?pwd=***&auth=***#frag"),
    ("redis://host/0?ssl_password=a&api-key=b", "redis://host/0?ssl_password=***&api-key=***"),
    ("redis://host/0?password=", "redis://host/0?password="),
    ("redis://:pw@host/0?password=pw", "redis://:***@host/0?password=***"),
    ("https://host/path?user=me&token=t0k", "https://host/path?user=me&token=***"),
    # inside a message
    ("Redis at redis://:pw@h/0, key prefix 'x'", "Redis at redis://:***@h/0, key prefix 'x'"),
    ("dsn: host=h password=pw dbname=d", "dsn: host=h password=*** dbname=d"),
    ("Error 111 connecting to 127.0.0.1:1. Connection refused.",
     "Error 111 connecting to 127.0.0.1:1. Connection refused."),
    ("Access denied for user 'root'@'h' (using password: YES)",
     "Access denied for user 'root'@'h' (using password: YES)"),
]


@pytest.mark.parametrize(("text", "expected"), REDACTIONS)
def test_redact_url(text: str, expected: str) -> None:
    """Every URL form masks its password (user info or query) as ***, keeping the rest."""
    assert redact_url(text) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql+psycopg://app:pw@db/app", "postgresql+psycopg://app:***@db/app"),
        ("postgresql+psycopg://app@db/a?password=pw", "postgresql+psycopg://app@db/a?password=***"),
        ("mysql+pymysql://u:p%40w@db/app?PASSWORD=x", "mysql+pymysql://u:***@db/app?PASSWORD=***"),
        ("sqlite:///tmp/app.db", "sqlite:///tmp/app.db"),
        ("not a URL user:pw@h", "not a URL user:***@h"),
    ],
)
def test_redact_sqlalchemy_url(url: str, expected: str) -> None:
    """SQLAlchemy URLs, as strings or URL objects, hide the user-info and query passwords."""
    assert redact_sqlalchemy_url(url) == expected
    if "://" in url:
        assert redact_sqlalchemy_url(make_url(url)) == expected


def test_url_secrets_and_scrub() -> None:
    """url_secrets finds raw and decoded passwords; scrub removes them from any text."""
    assert url_secrets("redis://:p%40ss-word@h/0?password=other-one") == {
        "p%40ss-word", "p@ss-word", "other-one"
    }
    assert url_secrets(make_url("postgresql://u:p%40ss-word@h/d?pwd=xyzw")) == {
        "p@ss-word", "xyzw"
    }
    assert scrub("failed: p@ss-word rejected; pw kept", {"p@ss-word", "pw"}) == (
        "failed: *** rejected; pw kept"  # secrets under 4 characters are not replaced
    )


def test_redaction_does_not_import_sqlalchemy_eagerly() -> None:
    """Importing snowshard, its redaction helper and the Redis modules loads no SQLAlchemy."""
    code = (
        "import sys, snowshard, snowshard.redaction, snowshard.redis_issuer\n"
        "from snowshard.workers import RedisLease\n"
        "assert snowshard.redaction.redact_url('redis://:pw@h') == 'redis://:***@h'\n"
        "assert 'sqlalchemy' not in sys.modules, 'sqlalchemy imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -------------------------------------------------------------------------- end to end


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception chained to it (cause and context)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [current.__cause__, current.__context__]


class Witness:
    """Collects everything a user could see and asserts the password is in none of it."""

    def __init__(self, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture):
        self.capsys = capsys
        self.caplog = caplog
        self.seen: list[str] = []

    def look(self, *items: object) -> None:
        """Record the str and repr of objects, and of each exception's whole chain."""
        for item in items:
            self.seen += [str(item), repr(item)]
            if isinstance(item, BaseException):
                for linked in chain(item):
                    self.seen += [str(linked), repr(linked), repr(linked.args)]

    def fails(self, call: Callable[[], object], error: type[BaseException]) -> BaseException:
        """Run ``call``, expect ``error``, record it; return it."""
        with pytest.raises(error) as caught:
            call()
        self.look(caught.value)
        return caught.value

    def check(self, *secrets: str) -> None:
        """Nothing seen, logged or printed holds a secret."""
        out, err = self.capsys.readouterr()
        logged = [self.caplog.text] + [
            f"{record.getMessage()} {record.exc_text or ''}" for record in self.caplog.records
        ]
        for text in [*self.seen, out, err, *logged]:
            for secret in secrets or (PW,):
                assert secret not in text, text


@pytest.fixture
def witness(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> Witness:
    """A Witness capturing logs of every logger at DEBUG."""
    caplog.set_level(logging.DEBUG)
    return Witness(capsys, caplog)


def redis_urls(host_port: str, sock: Path) -> list[str]:
    """``PW`` given in every way a Redis URL takes a password."""
    return [
        f"redis://:{PW}@{host_port}/0",
        f"redis://default:{PW}@{host_port}/0",
        f"redis://{host_port}/0?password={PW}",
        f"redis://{host_port}/0?db=0&password={PW}",
        f"unix://{sock}?password={PW}",
    ]


def exercise_redis(witness: Witness, url: str, failure: type[SnowshardError]) -> None:
    """Lease, join_cluster and issuer on ``url``: each must fail with ``failure``."""
    lease = RedisLease(url, ttl=1.0)
    witness.look(lease)
    try:
        witness.fails(lambda: Snowflake(worker=lease), LeaseBackendError)
        witness.fails(lambda: lease.claim(lambda: 0), LeaseBackendError)  # the cached failure
        witness.look(lease)
    finally:
        lease.close()
    witness.fails(lambda: join_cluster(url, timeout=1.0), LeaseBackendError)
    with RedisIssuer(url, timeout=1.0) as issuer:
        witness.look(issuer)
        error = witness.fails(issuer.next_id, failure)
        assert str(error).startswith("Redis at ")


def test_unreachable_redis_never_shows_the_password(tmp_path: Path, witness: Witness) -> None:
    """Every Redis URL form, unreachable (port 1, a missing socket): no password anywhere."""
    urls = redis_urls("127.0.0.1:1", tmp_path / "missing.sock")
    urls.append(f"rediss://:{PW}@127.0.0.1:1/0")
    for url in urls:
        exercise_redis(witness, url, IssuerUnavailable)
    witness.check()


def test_wrong_password_never_shows_the_password(tmp_path: Path, witness: Witness) -> None:
    """A real Redis refusing PW (it wants another): every path fails without showing PW."""
    with RedisServer(tmp_path, password="the-right-one") as server:
        sock = tmp_path / "missing.sock"
        for url in redis_urls(f"127.0.0.1:{server.port}", sock)[:-1]:
            exercise_redis(witness, url, IssuerUnavailable)
    witness.check()


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        (f"redis://:{PW}@127.0.0.1:notaport/0", PW),
        ("redis://:S3cr3t/Sn0wsh4rd@127.0.0.1:1/0", "S3cr3t"),  # a raw '/' in the password
        (f"redis://:{PW}@127.0.0.1:99999/0", PW),
    ],
)
def test_malformed_redis_urls_are_named_errors_without_secrets(
    url: str, secret: str, witness: Witness
) -> None:
    """A Redis URL redis-py cannot parse is a WorkerConfigError/ConfigurationError showing no secret."""
    for call, error in (
        (lambda: RedisLease(url), WorkerConfigError),
        (lambda: join_cluster(url), WorkerConfigError),
        (lambda: RedisIssuer(url), ConfigurationError),
    ):
        caught = witness.fails(call, error)
        assert "invalid Redis URL redis://:***@127.0.0.1" in str(caught)
        assert caught.__cause__ is None and caught.__context__ is None
    witness.check(secret, "Sn0wsh4rd")


def test_working_redis_messages_hide_the_password(tmp_path: Path, witness: Witness) -> None:
    """With PW required and given, repr and the all-IDs-leased error show the URL masked."""
    with RedisServer(tmp_path, password=PW) as server:
        host_port = f"127.0.0.1:{server.port}"
        urls = (f"redis://:{PW}@{host_port}/0", f"redis://{host_port}/0?password={PW}")
        for number, url in enumerate(urls):
            prefix = f"w{number}"
            leases = [
                RedisLease(url, TWO, key_prefix=prefix, ttl=1.0, clock_skew=0.1) for _ in range(3)
            ]
            try:
                assert {lease.claim(lambda: 0).worker for lease in leases[:2]} == {0, 1}
                witness.look(*leases)
                third = leases[2]
                error = witness.fails(lambda: third.claim(lambda: 0), WorkerIdsExhausted)
                assert "Redis at redis://" in str(error) and "***" in str(error)
            finally:
                for lease in leases:
                    lease.close()
            with RedisIssuer(url, key_prefix=f"seq{number}") as issuer:
                assert issuer.next_id() > 0
                witness.look(issuer)
                assert "***" in repr(issuer)
    witness.check()


def database_urls(host_port: str, mysql_user: str = "root") -> list[str]:
    """``PW`` in the user info and as ``?password=``, for PostgreSQL and MariaDB."""
    return [
        f"postgresql+psycopg://postgres:{PW}@{host_port}/postgres",
        f"postgresql+psycopg://postgres@{host_port}/postgres?password={PW}",
        f"mysql+pymysql://{mysql_user}:{PW}@{host_port}/test",
        f"mysql+pymysql://{mysql_user}@{host_port}/test?password={PW}",
    ]


def exercise_database(witness: Witness, target: str | sa.URL | sa.Engine) -> None:
    """A DatabaseLease on ``target`` must fail to claim with LeaseBackendError."""
    lease = DatabaseLease(target, ttl=1.0)
    witness.look(lease)
    try:
        witness.fails(lambda: Snowflake(worker=lease), LeaseBackendError)
        witness.fails(lambda: lease.claim(lambda: 0), LeaseBackendError)
        witness.look(lease)
    finally:
        lease.close()


def test_unreachable_databases_never_show_the_password(witness: Witness) -> None:
    """PostgreSQL and MariaDB URLs on port 1, as strings, a URL object and an engine."""
    urls = database_urls("127.0.0.1:1")
    for url in urls:
        exercise_database(witness, url)
    exercise_database(witness, make_url(urls[1]))  # PostgreSQL, ?password=
    engine = sa.create_engine(urls[3])  # MariaDB, ?password=
    try:
        exercise_database(witness, engine)
    finally:
        engine.dispose()
    witness.check()


def test_mariadb_refusing_the_password_never_shows_it(
    mysql_url: str, witness: Witness
) -> None:
    """A real MariaDB refusing PW (access denied): the lease's error does not show PW."""
    server = make_url(mysql_url)
    host_port = f"{server.host}:{server.port or 3306}"
    for url in database_urls(host_port, server.username or "root")[2:]:
        exercise_database(witness, url)
    witness.check()


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql//postgres:{PW}@127.0.0.1:1/postgres",  # missing ':'
        f"nosuchdialect://postgres:{PW}@127.0.0.1:1/postgres",
        f"postgresql+nosuchdriver://postgres@127.0.0.1:1/postgres?password={PW}",
    ],
)
def test_unusable_database_urls_are_config_errors_without_secrets(
    url: str, witness: Witness
) -> None:
    """A URL SQLAlchemy refuses is a WorkerConfigError with no password and no driver chain."""
    error = witness.fails(lambda: DatabaseLease(url), WorkerConfigError)
    assert error.__cause__ is None and error.__context__ is None
    witness.check()


def test_working_database_messages_hide_the_password(
    pg_database_url: str, database_factory: DatabaseFactory, witness: Witness
) -> None:
    """On PostgreSQL with PW in the query, repr and the all-IDs-leased error mask it."""
    create_table(database_factory.engine(pg_database_url))
    url = f"{pg_database_url}?password={PW}"
    leases = [
        DatabaseLease(url, TWO, namespace="redaction", ttl=1.0, clock_skew=0.1) for _ in range(3)
    ]
    try:
        assert {lease.claim(lambda: 0).worker for lease in leases[:2]} == {0, 1}
        witness.look(*leases)
        error = witness.fails(lambda: leases[2].claim(lambda: 0), WorkerIdsExhausted)
        assert "?password=***" in str(error)
    finally:
        for lease in leases:
            lease.close()
    witness.check()


def test_cli_echoes_urls_without_passwords(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, witness: Witness
) -> None:
    """The CLI takes no lease URLs; a URL put where a layout goes is echoed masked."""
    monkeypatch.chdir(tmp_path)
    for name in ("SNOWSHARD_LAYOUT", "SNOWSHARD_DEBUG", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    url = f"redis://:{PW}@127.0.0.1:1/0"
    code, _, err = run(witness.capsys, "layout", "--layout", url)
    assert code == 2 and "redis://:***@127.0.0.1:1/0" in err
    witness.look(err)
    monkeypatch.setenv("SNOWSHARD_LAYOUT", f"unix:///tmp/r.sock?password={PW}")
    code, _, err = run(witness.capsys, "--debug", "layout")
    assert code == 1 and "Traceback" in err
    witness.look(err)
    monkeypatch.delenv("SNOWSHARD_LAYOUT")
    (tmp_path / "pyproject.toml").write_text(f'[tool.snowshard]\npreset = "{url}"\n')
    code, _, err = run(witness.capsys, "layout")
    assert code == 1 and "unknown layout preset 'redis://:***@127.0.0.1:1/0'" in err
    witness.look(err)
    witness.check()

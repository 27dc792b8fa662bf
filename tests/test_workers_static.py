"""Worker IDs from configuration: fixed, environment variable, StatefulSet ordinal, Redis INCR."""

from __future__ import annotations

import os

import pytest

from snowshard import Layout, Snowflake, WorkerIdError
from snowshard.workers import (
    HostWorker,
    WorkerConfigError,
    fixed_worker,
    join_cluster,
    worker_from_env,
    worker_from_hostname,
)
from tests.backends import RedisNamespace

SMALL = Layout(worker_bits=4)  # workers 0..15


def test_fixed_worker_returns_the_value() -> None:
    """A fixed worker in range is returned unchanged."""
    assert fixed_worker(15, SMALL) == 15


@pytest.mark.parametrize(
    ("value", "match"),
    [
        pytest.param(16, r"worker 16 \(fixed\) must be in 0\.\.15", id="too-big"),
        pytest.param(-1, r"must be in 0\.\.15", id="negative"),
        pytest.param(True, r"must be an int in 0\.\.15, got bool", id="bool"),
        pytest.param("3", r"got str '3'", id="str"),
    ],
)
def test_fixed_worker_is_validated(value: object, match: str) -> None:
    """A fixed worker outside the layout's range or not an int is refused, naming both."""
    with pytest.raises(WorkerConfigError, match=match):
        fixed_worker(value, SMALL)  # type: ignore[arg-type]


def test_worker_config_error_is_a_worker_id_error_and_value_error() -> None:
    """Configuration errors can be caught as WorkerIdError or as ValueError."""
    with pytest.raises(WorkerIdError):
        fixed_worker(99, SMALL)
    with pytest.raises(ValueError):
        fixed_worker(99, SMALL)


def test_worker_from_env_reads_the_variable() -> None:
    """The worker ID is read from $SNOWSHARD_WORKER_ID, whitespace ignored."""
    assert worker_from_env(SMALL, environ={"SNOWSHARD_WORKER_ID": " 7\n"}) == 7


def test_worker_from_env_custom_variable() -> None:
    """Another variable name can be given."""
    assert worker_from_env(SMALL, var="POD_WORKER", environ={"POD_WORKER": "3"}) == 3


@pytest.mark.parametrize(
    ("environ", "match"),
    [
        pytest.param({}, r"SNOWSHARD_WORKER_ID is not set; set it to a worker ID in 0\.\.15",
                     id="missing"),
        pytest.param({"SNOWSHARD_WORKER_ID": "x1"},
                     r"'x1' is not a decimal worker ID in 0\.\.15 \(\$SNOWSHARD_WORKER_ID\)",
                     id="not-int"),
        pytest.param({"SNOWSHARD_WORKER_ID": "-2"}, r"'-2' is not a decimal worker ID",
                     id="negative"),
        pytest.param({"SNOWSHARD_WORKER_ID": "\u0661\u0662"}, r"is not a decimal worker ID",
                     id="arabic-indic-digits"),
        pytest.param({"SNOWSHARD_WORKER_ID": "16"},
                     r"worker 16 \(from \$SNOWSHARD_WORKER_ID\) must be in 0\.\.15", id="big"),
    ],
)
def test_worker_from_env_errors(environ: dict[str, str], match: str) -> None:
    """A missing, malformed or out-of-range variable fails with the variable's name."""
    with pytest.raises(WorkerConfigError, match=match):
        worker_from_env(SMALL, environ=environ)


def test_worker_from_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without environ=, the process environment is read."""
    monkeypatch.setenv("SNOWSHARD_WORKER_ID", "9")
    assert worker_from_env(SMALL) == 9


@pytest.mark.parametrize(
    ("hostname", "offset", "expected"),
    [
        ("web-0", 0, 0),
        ("web-3", 0, 3),
        ("orders-api-12", 0, 12),
        ("web-3.web.prod.svc.cluster.local", 0, 3),
        ("web-3", 10, 13),
    ],
)
def test_worker_from_hostname_ordinal(hostname: str, offset: int, expected: int) -> None:
    """A StatefulSet pod name's ordinal (plus the offset) is the worker ID."""
    assert worker_from_hostname(SMALL, hostname=hostname, offset=offset) == expected


@pytest.mark.parametrize(
    ("hostname", "offset", "match"),
    [
        ("web", 0, r"hostname 'web' does not end in '-<ordinal>'"),
        ("web-3a", 0, r"does not end in '-<ordinal>'"),
        ("web-\u0663", 0, r"does not end in '-<ordinal>'"),
        ("web-16", 0, r"worker 16 \(ordinal 16 of 'web-16' \+ offset 0\) must be in 0\.\.15"),
        ("web-6", 10, r"worker 16 \(ordinal 6 of 'web-6' \+ offset 10\) must be in 0\.\.15"),
        ("web-1", -1, r"offset must be an int >= 0, got -1"),
    ],
)
def test_worker_from_hostname_errors(hostname: str, offset: int, match: str) -> None:
    """Hostnames without an ordinal, or ordinals past the layout, fail clearly."""
    with pytest.raises(WorkerConfigError, match=match):
        worker_from_hostname(SMALL, hostname=hostname, offset=offset)


def test_worker_from_hostname_defaults_to_this_host() -> None:
    """Without hostname=, the machine's hostname is used (error or ordinal, never silent)."""
    import socket

    label = socket.gethostname().split(".", 1)[0]
    tail = label.rsplit("-", 1)[-1]
    if "-" in label and tail.isdigit() and int(tail) <= 1023:
        assert worker_from_hostname() == int(tail)
    else:
        with pytest.raises(WorkerConfigError, match=repr(socket.gethostname())):
            worker_from_hostname()


def test_provider_int_keeps_the_fork_guard() -> None:
    """A worker from the environment is an int, so a forked child refuses to issue IDs."""
    worker = worker_from_env(SMALL, environ={"SNOWSHARD_WORKER_ID": "5"})
    generator = Snowflake(SMALL, worker=worker)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            generator.next_id()
            os.write(write, b"issued")
        except WorkerIdError:
            os.write(write, b"refused")
        os._exit(0)
    os.close(write)
    try:
        answer = os.read(read, 16)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert answer == b"refused"


def test_host_worker_fits_layout() -> None:
    """The host default still fits a narrow layout."""
    assert 0 <= HostWorker(SMALL)() <= SMALL.max_worker


def test_join_cluster_counts_up(redis_db: RedisNamespace) -> None:
    """join_cluster: successive joins get 0, 1, 2 from one Redis INCR key."""
    key = redis_db.key("joins")
    got = [join_cluster(redis_db.url, SMALL, key=key) for _ in range(3)]
    assert got == [0, 1, 2]


def test_join_cluster_wraps_at_the_layout(redis_db: RedisNamespace) -> None:
    """After max_worker + 1 joins the IDs wrap (the documented weakness of INCR mode)."""
    key = redis_db.key("joins")
    redis_db.client.set(key, 15)
    assert join_cluster(redis_db.client, SMALL, key=key) == 15
    assert join_cluster(redis_db.client, SMALL, key=key) == 0


def test_join_cluster_unreachable_redis() -> None:
    """An unreachable Redis raises a WorkerIdError naming the server."""
    from snowshard.workers import LeaseBackendError

    with pytest.raises(LeaseBackendError, match=r"127\.0\.0\.1:1/0 failed on INCR"):
        join_cluster("redis://127.0.0.1:1/0", SMALL, timeout=0.5)

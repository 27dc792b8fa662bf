"""Private servers for tests that stop, pause or restart one: Redis, PostgreSQL, MariaDB.

* :class:`RedisServer`: a ``redis-server`` process, loopback only, no persistence
  (``--save "" --appendonly no``), on a free port; optionally with a password
  (``--requirepass``) and TLS (a self-signed certificate made with openssl).
* :class:`PostgresCluster`: a PostgreSQL cluster of the Debian packaging
  (``pg_createcluster``, trust auth on 127.0.0.1, a free port), dropped with
  ``pg_dropcluster --stop`` afterwards. ``stop()`` is ``pg_ctlcluster stop -m immediate``
  (a crash: no shutdown checkpoint, committed work is recovered from the WAL on start).
* :class:`MariaDBServer`: a ``mariadbd`` process on its own data directory (under the test's
  ``tmp_path``), socket and free port; ``stop()`` is SIGKILL (a crash: InnoDB recovers).

These are the servers fault tests may stop; the shared test servers (5432/5433/3306/3307)
are never stopped, other tests use them at the same time. The Debian tools need root; as
another user the fixture skips (fails under SNOWSHARD_REQUIRE_BACKENDS=1).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

__all__ = [
    "MariaDBServer",
    "PostgresCluster",
    "RedisServer",
    "TLSFiles",
    "free_port",
    "make_tls_files",
    "require_redis_server",
]


def require_redis_server() -> str:
    """The redis-server binary, or skip (fail under SNOWSHARD_REQUIRE_BACKENDS=1)."""
    from tests.backends import backend_unavailable

    path = shutil.which("redis-server")
    if path is None:
        backend_unavailable("redis-server is not on PATH: cannot start a private Redis")
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class TLSFiles:
    cert: Path  # self-signed, also the CA
    key: Path


def make_tls_files(directory: Path) -> TLSFiles:
    """A self-signed certificate for 127.0.0.1 (skip if openssl is missing)."""
    from tests.backends import backend_unavailable

    openssl = shutil.which("openssl")
    if openssl is None:
        backend_unavailable("openssl is not on PATH: cannot make a TLS certificate")
    cert, key = directory / "redis-cert.pem", directory / "redis-key.pem"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    return TLSFiles(cert=cert, key=key)


class RedisServer:
    """A private redis-server: ``start()``, ``stop()``, ``pause()``/``resume()``; ``url``."""

    def __init__(
        self,
        directory: Path,
        *,
        password: str | None = None,
        tls: TLSFiles | None = None,
        port: int | None = None,
    ) -> None:
        self.binary = require_redis_server()
        self.directory = directory
        self.password = password
        self.tls = tls
        self.port = port if port is not None else free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._log = directory / f"redis-{self.port}.log"

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.tls is None:
            return f"redis://{auth}127.0.0.1:{self.port}/0"
        return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls.cert}"

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def start(self, timeout: float = 10.0) -> None:
        """Start the server and wait until it answers PING."""
        args = [
            self.binary, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(self.directory), "--daemonize", "no",
        ]
        if self.tls is None:
            args += ["--port", str(self.port)]
        else:
            args += [
                "--port", "0", "--tls-port", str(self.port),
                "--tls-cert-file", str(self.tls.cert), "--tls-key-file", str(self.tls.key),
                "--tls-ca-cert-file", str(self.tls.cert), "--tls-auth-clients", "no",
            ]
        if self.password:
            args += ["--requirepass", self.password]
        with open(self._log, "ab") as log:
            self._process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + timeout
        while True:
            client = redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1)
            try:
                if client.ping():
                    return
            except redis.RedisError:
                pass
            finally:
                client.close()
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"private redis-server did not start: {self._log.read_text()[-2000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (SIGTERM; its data is gone: no persistence)."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            try:
                os.kill(process.pid, signal.SIGCONT)  # in case it was paused
            except ProcessLookupError:
                pass
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        else:
            process.wait()

    def pause(self) -> None:
        """SIGSTOP the server: clients time out, keys stay."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --------------------------------------------------------------------------- SQL servers


def _run(args: list[str], timeout: float = 120.0) -> None:
    """Run a server tool; fail the test with its output if it does not succeed."""
    done = subprocess.run(
        args, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"{' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")


def _require_root_tools(*tools: str) -> None:
    from tests.backends import backend_unavailable

    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        backend_unavailable(f"{', '.join(missing)} not on PATH: cannot start a private server")
    if os.geteuid() != 0:
        backend_unavailable(f"{tools[0]} needs root to start a private server")


def _wait_answering(url: str, timeout: float) -> str | None:
    """Connect to ``url`` until it answers; None, or the last error after ``timeout`` s."""
    engine = sa.create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 2})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                with engine.connect() as conn:
                    conn.exec_driver_sql("SELECT 1")
                return None
            except sa.exc.DBAPIError as exc:
                if time.monotonic() > deadline:
                    return " ".join(str(exc.orig).split())[:500]
            time.sleep(0.1)
    finally:
        engine.dispose()


class PostgresCluster:
    """A private PostgreSQL cluster: ``create()``, ``stop()``, ``start()``, ``drop()``; ``url``.

    Named ``snowshard_t_<random>`` (``pg_lsclusters`` shows it while it lives), trust auth
    for local and 127.0.0.1 logins, on a free port.
    """

    def __init__(self, version: str | None = None) -> None:
        _require_root_tools("pg_createcluster", "pg_ctlcluster", "pg_dropcluster")
        if version is None:
            versions = sorted(os.listdir("/etc/postgresql"), key=lambda v: [int(p) for p in v.split(".")])
            version = versions[-1]
        self.version = version
        self.name = "snowshard_t_" + secrets.token_hex(5)
        self.port = free_port()
        self._created = False

    @property
    def url(self) -> str:
        """Server-level URL (database ``postgres``), psycopg 3."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def create(self, timeout: float = 60.0) -> None:
        """``pg_createcluster`` (initdb, trust auth), then start it and wait until it answers."""
        self._created = True
        _run([
            "pg_createcluster", "--quiet", self.version, self.name, "-p", str(self.port),
            "-o", "max_prepared_transactions=8", "-o", "shared_buffers=16MB",
            "--", "--auth=trust", "--no-sync",
        ])
        self.start(timeout)

    def start(self, timeout: float = 60.0) -> None:
        """Start the cluster, unless it answers (it recovers from its WAL after a crash)."""
        if _wait_answering(self.url, 0) is None:
            return
        _run(["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, "start"])
        problem = _wait_answering(self.url, timeout)
        if problem is not None:
            pytest.fail(f"private PostgreSQL {self.name} did not answer: {problem}")

    def stop(self) -> None:
        """Stop it the hard way: ``-m immediate`` (every backend quits without a checkpoint)."""
        _run(["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, "stop",
              "--", "-m", "immediate"])

    def drop(self) -> None:
        """``pg_dropcluster --stop``: the cluster, its data and configuration are gone."""
        if self._created:
            self._created = False
            _run(["pg_dropcluster", "--stop", self.version, self.name])


class MariaDBServer:
    """A private ``mariadbd`` on ``directory``: ``create()``, ``stop()``, ``start()``; ``url``.

    It runs as root (like the test), so ``directory`` may be inside pytest's ``tmp_path``.

    ``root@127.0.0.1`` without a password, like the shared servers; database ``test``.
    """

    def __init__(self, directory: Path) -> None:
        _require_root_tools("mariadbd", "mariadb-install-db")
        self.directory = directory
        self.datadir = directory / "data"
        self.socket = directory / "mariadbd.sock"
        self.tmpdir = directory / "tmp"
        """Its own temporary directory: at start a mariadbd deletes every ``#sql*`` file in
        its tmpdir, which in a shared /tmp are other servers' live temporary tables."""
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._log = directory / "mariadbd.log"

    @property
    def url(self) -> str:
        """URL of its ``test`` database (PyMySQL)."""
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/test"

    def create(self, timeout: float = 60.0) -> None:
        """``mariadb-install-db`` into ``directory``, start, and add root@127.0.0.1."""
        _run([
            "mariadb-install-db", "--no-defaults", "--user=root", f"--datadir={self.datadir}",
            "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve",
        ])
        self.start(timeout, first=True)

    def start(self, timeout: float = 60.0, *, first: bool = False) -> None:
        """Start ``mariadbd`` (unless it runs) and wait until root@127.0.0.1 can log in."""
        if self._process is not None and self._process.poll() is None:
            return
        # --user=root: the data directory is under the test's tmp_path, which only root
        # may enter (pytest makes it 0700).
        self.tmpdir.mkdir(exist_ok=True)
        args = [
            shutil.which("mariadbd") or "mariadbd", "--no-defaults", "--user=root",
            f"--datadir={self.datadir}", f"--port={self.port}", "--bind-address=127.0.0.1",
            f"--socket={self.socket}", f"--pid-file={self.directory / 'mariadbd.pid'}",
            f"--tmpdir={self.tmpdir}",
            "--skip-name-resolve", "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci", "--innodb-buffer-pool-size=16M",
            "--skip-log-bin",
        ]
        with open(self._log, "ab") as log:
            self._process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        if first:
            self._grant_root(timeout)
        problem = _wait_answering(self.url, timeout)
        if problem is not None:
            self.stop()
            pytest.fail(f"private mariadbd did not answer: {problem}; {self._log_tail()}")

    def _grant_root(self, timeout: float) -> None:
        """Over the socket (root@localhost): root@127.0.0.1 and database ``test``."""
        sql = (
            "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';"
            " GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;"
            " CREATE DATABASE IF NOT EXISTS test;"
        )
        deadline = time.monotonic() + timeout
        while True:
            done = subprocess.run(
                ["mariadb", "--no-defaults", "--protocol=socket", f"--socket={self.socket}",
                 "-uroot", "-e", sql],
                capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False,
                timeout=30,
            )
            if done.returncode == 0:
                return
            if time.monotonic() > deadline or (
                self._process is not None and self._process.poll() is not None
            ):
                self.stop()
                pytest.fail(f"private mariadbd: {done.stderr.strip()}; {self._log_tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGKILL, as a crash would (InnoDB recovers committed work on the next start)."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.kill()
            process.wait()

    def _log_tail(self) -> str:
        return self._log.read_text(errors="replace")[-2000:] if self._log.exists() else ""

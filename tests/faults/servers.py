"""Private ``redis-server`` processes for tests that stop, pause or restart Redis.

Loopback only, no persistence (``--save "" --appendonly no``), on a free port; optionally
with a password (``--requirepass``) and TLS (a self-signed certificate made with openssl).
"""

from __future__ import annotations

import os
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

__all__ = ["RedisServer", "TLSFiles", "free_port", "make_tls_files", "require_redis_server"]


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

"""Clients of a stopped Redis whose port the kernel may hand them as their own.

``python -m tests.faults.self_connect PORT REDIS_SERVER DIRECTORY``, run in a private network
namespace whose ephemeral port range is ``PORT`` and ``PORT + 1`` (see
``test_faults_redis.py``), so that connecting to ``127.0.0.1:PORT`` while nothing listens
there is given ``PORT`` as its source port (Linux's ``connect`` tries the ports of the
range's first port's parity first): TCP then connects the socket to itself. Prints one
JSON object:

``issuer``, ``lease``
    the outcomes (:func:`outcomes`) of 20 ``next_id`` calls of one
    :class:`~snowshard.redis_issuer.RedisIssuer`, and of 10 attempts to start a generator
    on a new :class:`~snowshard.workers.RedisLease`, while Redis is down;
``resumed_ms``
    how long after ``redis-server`` was started on ``PORT`` the issuer issued again (``None``
    if not within 10 s: the server could not take its port back).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable

from snowshard import Layout, Snowflake
from snowshard.redis_issuer import RedisIssuer
from snowshard.workers import RedisLease


def outcomes(attempt: Callable[[], object], times: int) -> list[str]:
    """Each attempt's outcome: "ok", or the exception's class, with " (itself)" when its
    message says the connection reached itself (so the fault did happen)."""
    found = []
    for _ in range(times):
        try:
            attempt()
            found.append("ok")
        except Exception as exc:  # noqa: BLE001 - the class is the result
            itself = " (itself)" if "reached itself" in str(exc) else ""
            found.append(type(exc).__name__ + itself)
    return found


def start_generator(url: str) -> None:
    lease = RedisLease(url, Layout(), key_prefix="self", ttl=1.0, timeout=0.2)
    try:
        Snowflake(Layout(), worker=lease)
    finally:
        lease.close()


def main(port: int, binary: str, directory: str) -> None:
    url = f"redis://127.0.0.1:{port}/0"
    with RedisIssuer(url, key_prefix="self", timeout=0.2) as issuer:
        result: dict[str, object] = {
            "issuer": outcomes(issuer.next_id, 20),
            "lease": outcomes(lambda: start_generator(url), 10),
        }
        server = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
             "--appendonly", "no", "--dir", directory],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        )
        try:
            started = time.monotonic()
            result["resumed_ms"] = None
            while time.monotonic() - started < 10:
                try:
                    issuer.next_id()
                except Exception:  # noqa: BLE001 - any failure: not yet
                    time.sleep(0.02)
                    continue
                result["resumed_ms"] = round((time.monotonic() - started) * 1000)
                break
        finally:
            server.terminate()
            server.wait()
    print(json.dumps(result))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])

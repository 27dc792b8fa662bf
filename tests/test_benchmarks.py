"""Smoke tests of the benchmarks: each script runs end to end at tiny sizes.

The benchmark scripts are run as their users run them (``python benchmarks/<script>.py``,
in a child process) on the real servers, with tiny sizes, so they cannot rot unnoticed;
their figures are not checked (performance is never asserted in tests). The latency proxy
is checked for what the figures rely on: it delays each direction, and it passes every
byte through, in order.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
TIMEOUT = 120  # seconds, per script; they take a few at these sizes


def _benchmark_module(name: str) -> ModuleType:
    """``benchmarks/<name>.py``, imported from its path (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


latency_proxy = _benchmark_module("latency_proxy")
paired = _benchmark_module("paired")


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A local TCP echo server's port."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _run(script: str, *args: str) -> str:
    """Run ``benchmarks/<script>`` with ``args``; its stdout (fails with its stderr)."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _dropped(output: str, count: int | None = None) -> list[str]:
    """The database names a benchmark reports it created (and dropped); ``count`` of them."""
    found = re.search(r"^throw-away databases \(dropped\): (.+)$", output, re.MULTILINE)
    assert found, output
    names = [name.strip().split(":")[-1] for name in found.group(1).split(",")]
    assert count is None or len(names) == count, names
    return names


def _ratios(output: str, measure: str) -> list[str]:
    """The ratios (``1.23x``) printed on the table row of ``measure``, left to right."""
    line = re.search(rf"^{re.escape(measure)} .*$", output, re.MULTILINE)
    assert line, output
    return re.findall(r"\d+\.\d\dx", line.group(0))


def _existing(server_url: str, names: list[str]) -> list[str]:
    """Which of ``names`` still exist as databases on ``server_url``."""
    url = sa.make_url(server_url)
    postgres = url.get_backend_name() == "postgresql"
    sql = (
        "SELECT datname FROM pg_database WHERE datname IN :names"
        if postgres
        else "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME IN :names"
    )
    query = sa.text(sql).bindparams(sa.bindparam("names", expanding=True))
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return list(conn.execute(query, {"names": names}).scalars())
    finally:
        engine.dispose()


def test_proxy_delays_each_direction(echo_port: int) -> None:
    """Every round trip through the proxy takes at least twice its one-way delay."""
    delay_ms = 30.0
    trips = []
    with (
        latency_proxy.ProxyProcess("127.0.0.1", echo_port, delay_ms=delay_ms) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client,
    ):
        for index in range(3):
            message = f"ping {index}".encode()
            started = time.perf_counter()
            client.sendall(message)
            assert client.recv(100) == message
            trips.append(time.perf_counter() - started)
    assert min(trips) >= 2 * delay_ms / 1000, trips


def test_proxy_passes_every_byte_in_order(echo_port: int) -> None:
    """Megabytes sent in uneven chunks come back through the proxy unchanged."""
    payload = os.urandom(3 * 1024 * 1024)
    received = bytearray()
    with (
        latency_proxy.ProxyProcess("127.0.0.1", echo_port, delay_ms=1.0) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as client,
    ):

        def send() -> None:
            offset, size = 0, 1
            while offset < len(payload):
                client.sendall(payload[offset : offset + size])
                offset += size
                size = size * 7 % 100_003 + 1  # 1 byte to ~100 kB, unevenly

        sender = threading.Thread(target=send)
        sender.start()
        while len(received) < len(payload) and (chunk := client.recv(1 << 20)):
            received += chunk
        sender.join()
    assert bytes(received) == payload


def test_proxy_refuses_a_negative_delay() -> None:
    """A negative delay is refused up front, naming the value."""
    with pytest.raises(ValueError, match=r"delay_ms must be >= 0, not -1"):
        latency_proxy.ProxyProcess("127.0.0.1", 5432, delay_ms=-1)


def test_paired_measure_rotates_the_first_variant_and_pairs_ratios() -> None:
    """paired.measure warms up, starts each round with the next variant, and the
    baseline's ratio to itself is exactly 1."""
    log: list[str] = []
    actions = {name: (lambda name=name: log.append(name)) for name in ("a", "b", "c")}
    found = paired.measure(actions, rounds=4, calls=2, warm_up=3)
    assert log[:9] == ["a"] * 3 + ["b"] * 3 + ["c"] * 3
    timed = log[9:]
    assert len(timed) == 4 * 3 * 2
    firsts = [timed[r * 6] for r in range(4)]
    assert firsts == ["a", "b", "c", "a"]
    assert timed[6:12] == ["b", "b", "c", "c", "a", "a"]
    assert found["a"][1] == 1.0
    assert set(found) == {"a", "b", "c"}
    assert all(micros > 0 and ratio > 0 for micros, ratio in found.values())


@pytest.mark.slow
def test_bench_sharding_runs_and_drops_its_databases(postgres_url: str) -> None:
    """bench_sharding prints every measure with a ratio per variant, and with --steps the
    keyed read's client CPU per layer; its databases are gone."""
    output = _run(
        "bench_sharding.py", "--postgres", postgres_url, "--steps",
        "--users", "30", "--per-user", "2", "--rounds", "2", "--calls", "2",
    )  # fmt: skip
    for measure, variants in (("keyed read", 5), ("get by ID", 5), ("fan-out top-20", 4)):
        ratios = _ratios(output, measure)
        assert len(ratios) == variants and ratios[0] == "1.00x", ratios  # plain comes first
    layers = re.findall(r"^(.+?) +(\d+) µs +(\d+\.\d\d)x +([+-]\d+\.\d) µs$", output, re.MULTILINE)
    assert [name for name, *_ in layers] == [
        "plain", "physical class", "+ no-op hook", "ShardedSession, physical",
        "ShardedSession, routed",
    ], output  # fmt: skip
    assert layers[0][2:] == ("1.00", "+0.0") and all(int(cpu) > 0 for _, cpu, *_ in layers)
    assert _existing(postgres_url, _dropped(output, 2)) == []


@pytest.mark.slow
def test_bench_string_order_runs_and_drops_its_databases(postgres_url: str) -> None:
    """bench_string_order prints the four reads with ratios to the plain one, and the
    ranking's own cost; its databases are gone."""
    output = _run(
        "bench_string_order.py", "--postgres", postgres_url,
        "--rows", "200", "--rounds", "1", "--calls", "2",
    )  # fmt: skip
    for measure in ("plain by name", "sharded by name", "plain by id", "sharded by id"):
        assert len(_ratios(output, measure)) == 1, output
    assert _ratios(output, "plain by name") == ["1.00x"]
    assert re.search(r"^ranking +[+-]\d+ µs per call$", output, re.MULTILINE), output
    assert _existing(postgres_url, _dropped(output, 2)) == []


@pytest.mark.slow
def test_bench_instructions_counts_each_variant() -> None:
    """bench_instructions prints instructions per call of plain and sharded, and a ratio."""
    output = _run(
        "bench_instructions.py", "--measure", "get", "--calls", "3", "--warm-up", "3",
        "--users", "20",
    )  # fmt: skip
    line = re.search(r"^get by ID +([\d,]+) +([\d,]+) +(\d+\.\d\d)x", output, re.MULTILINE)
    assert line, output
    plain, sharded = (int(n.replace(",", "")) for n in line.groups()[:2])
    assert plain > 10_000 and sharded > 10_000, line.group(0)


@pytest.mark.slow
def test_bench_fanout_runs_and_drops_its_databases(postgres_url: str) -> None:
    """bench_fanout prints each measure with and without the proxy, for every variant
    (the driver-only pair included); its databases are gone."""
    output = _run(
        "bench_fanout.py", "--postgres", postgres_url,
        "--rows", "200", "--rounds", "1", "--calls", "2", "--databases", "2",
    )  # fmt: skip
    assert re.search(r"round trip .*: [\d.]+ ms direct, [\d.]+ ms through the proxy", output)
    # the driver-only pair comes last; "driver x2": one statement per database
    assert re.search(r"^measure .* default +driver +driver x2$", output, re.MULTILINE), output
    for measure in ("top-20 (proxy)", "count (proxy)", "top-20 (direct)", "count (direct)"):
        ratios = _ratios(output, measure)
        assert len(ratios) == 6 and ratios[0] == "1.00x", output
    assert _existing(postgres_url, _dropped(output, 2)) == []


@pytest.mark.slow
def test_bench_stream_memory_runs_and_drops_its_databases(postgres_url: str) -> None:
    """bench_stream_memory reports plain and sharded growth; its databases are gone.

    PostgreSQL only, ordered only: each variant is a child process of its own (~1.5 s).
    """
    output = _run(
        "bench_stream_memory.py", "--postgres", postgres_url, "--no-mysql",
        "--rows", "200", "--rounds", "1", "--queries", "ordered",
    )  # fmt: skip
    line = re.search(r"^\s*postgresql\s+ordered\s.*$", output, re.MULTILINE)
    assert line, output
    assert re.search(r"\s(met|MISSED)\s", line.group(0)), line.group(0)
    assert "mariadb" not in output
    assert _existing(postgres_url, _dropped(output, 2)) == []


@pytest.mark.slow
def test_bench_bulk_reports_every_backend_with_ratios(postgres_url: str, mysql_url: str) -> None:
    """bench_bulk prints a baseline and a bulk_insert rate with its ratio for each backend."""
    output = _run(
        "bench_bulk.py", "--postgres", postgres_url, "--mysql", mysql_url,
        "--rows", "300", "--rounds", "1", "--no-orm",
    )  # fmt: skip
    for backend in ("postgresql", "mysql", "sqlite"):
        lines = re.findall(rf"^{backend}\s.*$", output, re.MULTILINE)
        assert any("1.00x" in line for line in lines), output
        bulk = [line for line in lines if "bulk_insert" in line]
        assert len(bulk) == 1 and re.search(r"\d\.\d\dx\s+>= 0\.\dx", bulk[0]), output


@pytest.mark.slow
def test_bench_reshard_reports_copy_capture_and_cutover(
    postgres_url: str, mysql_url: str, postgres2_url: str
) -> None:
    """bench_reshard prints each part's baseline and ratio (logical capture too), and the
    cutover's latency windows."""
    output = _run(
        "bench_reshard.py", "--postgres", postgres_url, "--mysql", mysql_url,
        "--postgres-logical", postgres2_url,
        "--rows", "500", "--writes", "40", "--cutover-rows", "500",
    )  # fmt: skip
    assert len(re.findall(r"^postgresql\s+capture \d thread\(s\) logical slot .* <= 1\.3x$", output, re.MULTILINE)) == 2
    assert re.search(r"slot -> log\s+[\d,]+ changes/s", output), output
    for backend in ("postgresql", "mysql"):
        assert re.search(rf"^{backend}\s+copy\s+INSERT\.\.\.SELECT .* 1\.00x$", output, re.MULTILINE), output
        assert re.search(rf"^{backend}\s+copy\s+reshard start .* \d\.\d\dx\s+>= 0\.5x$", output, re.MULTILINE)
        assert len(re.findall(rf"^{backend}\s+capture \d thread\(s\) captured .* <= 1\.3x$", output, re.MULTILINE)) == 2
    assert re.search(r"writes during cutover\s+p50\s+[\d.]+ ms\s+p99\s+[\d.]+ ms", output), output
    assert re.search(r"pause \d+ ms", output), output

"""Redis going away under running generators: leases and the issuer, on a private server."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from snowshard import Layout
from tests.faults.conftest import Child, wall_ms
from tests.backends import backend_unavailable
from tests.faults.servers import RedisServer, require_redis_server

pytestmark = [pytest.mark.slow, pytest.mark.redis]

TTL = 0.6
LAYOUT = Layout()


def mark_empty(server: RedisServer, prefix: str) -> None:
    """Tell leases that this brand-new server holds no leases (skips the start-up fence)."""
    with redis.Redis.from_url(server.url) as client:
        run_id = client.info("server")["run_id"]
        client.set(f"{prefix}:era", f"{run_id}:0")


@pytest.mark.parametrize("outage", ["restart", "pause"])
def test_generators_stop_within_the_ttl_and_resume_without_duplicates(
    outage: str, tmp_path: Path, spawn: Callable[..., Child]
) -> None:
    """Redis stopped or frozen past the TTL: holders stop in time, resume, repeat no ID."""
    # Three lease holders. "restart" loses Redis's data (no persistence), "pause" SIGSTOPs it.
    server = RedisServer(tmp_path)
    server.start()
    try:
        mark_empty(server, "w")
        holders = [
            spawn(
                f"holder{i}", "hold", "--target", server.url, "--prefix", "w",
                "--ttl", str(TTL), "--interval", "0.002",
            )
            for i in range(3)
        ]
        workers = {int(str(h.wait_ready()["worker"])) for h in holders}
        assert workers == {0, 1, 2}
        time.sleep(0.3)
        if outage == "restart":
            server.stop()
        else:
            server.pause()
        down_at = wall_ms()  # Redis answers no more
        time.sleep(TTL + 0.5)
        up_at = wall_ms()
        if outage == "restart":
            server.start()
        else:
            server.resume()
        for holder in holders:  # restart: after the grace of ttl + 1 s - uptime
            holder.wait_issued_after(up_at, timeout=TTL + 4)
        for holder in holders:
            holder.finish()
    finally:
        server.stop()
    every_id: list[int] = []
    for holder in holders:
        record = holder.record()
        every_id += [value for value, _ in record.ids]
        issued_at = [LAYOUT.parse(value).unix_ms for value, _ in record.ids]
        during = [ms for ms in issued_at if down_at < ms < up_at]
        # the deadline is 0.9 TTL after the last renewal, sent before Redis went away
        assert max(during, default=down_at) <= down_at + TTL * 1000, "stopped late"
        refused = [wall for wall, _, _ in record.errors if down_at + TTL * 1000 < wall < up_at]
        assert refused, "it kept issuing IDs without a lease"
        after = [wall for _, wall in record.ids if wall > up_at]
        assert after, "it never resumed"
        if outage == "restart":  # Redis forgot the leases: no grant before they all lapsed
            assert min(after) >= up_at + TTL * 1000
    assert len(every_id) == len(set(every_id)) > 300


def test_issuer_fails_cleanly_during_an_outage_and_never_repeats(
    tmp_path: Path, spawn: Callable[..., Child]
) -> None:
    """Two issuer processes across a Redis restart: errors while it is down, no repeats."""
    server = RedisServer(tmp_path)
    server.start()
    try:
        issuers = [
            spawn(f"issuer{i}", "issue", "--target", server.url, "--prefix", "seq",
                  "--interval", "0.001")
            for i in range(2)
        ]
        for issuer in issuers:
            issuer.wait_ready()
        time.sleep(0.3)
        server.stop()
        down_at = wall_ms()
        time.sleep(0.5)
        up_at = wall_ms()
        server.start()
        for issuer in issuers:
            # 30 s, not 5: in 4 of about 16 CI runs a child went silent for over 5 s while
            # the other legs loaded the machine, without even running a signal handler
            issuer.wait_issued_after(up_at, timeout=30)
            issuer.finish()
    finally:
        server.stop()
    every_id: list[int] = []
    for issuer in issuers:
        record = issuer.record()
        every_id += [value for value, _ in record.ids]
        issued_at = [LAYOUT.parse(value).unix_ms for value, _ in record.ids]
        assert not [ms for ms in issued_at if down_at < ms < up_at]  # Redis TIME
        names = {name for wall, name, _ in record.errors if down_at < wall < up_at}
        assert names == {"IssuerUnavailable"}
        assert [wall for _, wall in record.ids if wall > up_at], "it never resumed"
    # ~600 at full speed; a loaded 2-core machine has issued under 300 in 0.3 s
    assert len(every_id) == len(set(every_id)) > 100


def test_clients_of_a_stopped_redis_never_connect_to_themselves(tmp_path: Path) -> None:
    """Redis down on a port the kernel may lend: clean errors, and Redis can come back."""
    # A private network namespace (unshare -rn: no root needed) whose ephemeral port range
    # is 40002-40003, so a connect to 127.0.0.1:40002 gets 40002 as its own port.
    binary = require_redis_server()
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is None or ip is None:
        backend_unavailable("unshare (util-linux) and ip (iproute2) are needed on PATH")
    setup = "ip link set lo up && echo '40002 40003' > /proc/sys/net/ipv4/ip_local_port_range"
    child = f"{shlex.quote(sys.executable)} -m tests.faults.self_connect 40002 " + " ".join(
        shlex.quote(str(arg)) for arg in (binary, tmp_path)
    )
    done = subprocess.run(
        [unshare, "-rn", "sh", "-c", f"{setup} && exec {child}"],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2],
    )
    if done.returncode and "unshare" in done.stderr and not done.stdout:
        backend_unavailable(f"no private network namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert {kind.removesuffix(" (itself)") for kind in result["issuer"]} == {"IssuerUnavailable"}
    assert {kind.removesuffix(" (itself)") for kind in result["lease"]} == {"LeaseBackendError"}
    assert "IssuerUnavailable (itself)" in result["issuer"]  # the fault was injected
    assert result["resumed_ms"] is not None, "redis-server could not take its port back"

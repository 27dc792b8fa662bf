"""A fleet of forked processes sharing a few leased worker IDs, for the fencing fault tests.

Each process loops until its stop file exists: it takes a lease (retrying while every worker
ID is taken), builds a generator on it, issues IDs in bursts for a random while, then
releases the lease and starts over; an error from ``next_id`` (the lease lapsed or was
lost) also sends it back to a fresh lease. Every ID goes to the process's own file as
int64s, appended after each burst, so the test can check the whole run for duplicates.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from array import array
from pathlib import Path

from snowshard import Layout, Snowflake, SnowshardError
from snowshard.workers import DatabaseLease, Lease, RedisLease

__all__ = ["Fleet", "LeaseSettings", "duplicates"]

_FORK = multiprocessing.get_context("fork")


class LeaseSettings:
    """Where and how the fleet leases its worker IDs."""

    def __init__(
        self, store: str, url: str, prefix: str, ttl: float, skew: float
    ) -> None:
        self.store = store
        self.url = url
        self.prefix = prefix
        self.ttl = ttl
        self.skew = skew

    def lease(self, layout: Layout) -> Lease:
        skew = self.skew
        if self.store == "redis":
            return RedisLease(
                self.url, layout, key_prefix=self.prefix, ttl=self.ttl, clock_skew=skew
            )
        return DatabaseLease(
            self.url, layout, namespace=self.prefix, ttl=self.ttl, clock_skew=skew
        )


def _member(settings: LeaseSettings, out: str, stop: str, log: str, seed: int) -> None:
    """One process of the fleet (runs in the forked child)."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    rng = random.Random(seed)
    layout = Layout(worker_bits=2)
    stopped = Path(stop)
    with open(out, "ab", buffering=0) as sink:
        while not stopped.exists():
            lease = settings.lease(layout)
            try:
                generator = Snowflake(layout, worker=lease, sequence_start="reset")
            except SnowshardError:  # all taken, or the store is down: try again soon
                lease.close()
                time.sleep(0.02)
                continue
            until = time.monotonic() + rng.uniform(0.5, 2.0)
            try:
                while time.monotonic() < until and not stopped.exists():
                    burst = array("q", (generator.next_id() for _ in range(50)))
                    sink.write(burst.tobytes())
                    time.sleep(0.002)
            except SnowshardError:  # the lease lapsed or was lost: a fresh one
                pass
            finally:
                lease.close()


class Fleet:
    """``count`` forked processes; :meth:`stop` ends them, :meth:`ids` reads what they issued."""

    def __init__(self, directory: Path, settings: LeaseSettings, count: int = 8) -> None:
        self.directory = directory
        self.stop_file = directory / "fleet.stop"
        self.outs = [directory / f"member{i}.ids" for i in range(count)]
        self.logs = [directory / f"member{i}.log" for i in range(count)]
        self.processes = [
            _FORK.Process(
                target=_member,
                args=(settings, str(out), str(self.stop_file), str(log), i),
                name=f"fleet{i}",
            )
            for i, (out, log) in enumerate(zip(self.outs, self.logs))
        ]
        for process in self.processes:
            process.start()

    def pids(self) -> list[int]:
        return [int(process.pid or 0) for process in self.processes]

    def issued(self, index: int) -> int:
        """How many IDs member ``index`` has written so far."""
        out = self.outs[index]
        return out.stat().st_size // 8 if out.exists() else 0

    def busy_members(self, settle: float = 0.2) -> list[int]:
        """Members that wrote IDs during the last ``settle`` seconds (they hold a lease)."""
        before = [self.issued(i) for i in range(len(self.outs))]
        time.sleep(settle)
        return [i for i in range(len(self.outs)) if self.issued(i) > before[i]]

    def stop(self, timeout: float = 30.0) -> None:
        """Ask every member to stop; kill (after SIGCONT) any that does not."""
        self.stop_file.touch()
        deadline = time.monotonic() + timeout
        for process in self.processes:
            process.join(max(0.1, deadline - time.monotonic()))
            if process.exitcode is None and process.pid is not None:
                os.kill(process.pid, signal.SIGCONT)
                os.kill(process.pid, signal.SIGKILL)
                process.join()

    def ids(self, member: int | None = None) -> array[int]:
        """Every ID the fleet (or only ``member``) issued."""
        every = array("q")
        for out in self.outs if member is None else [self.outs[member]]:
            data = out.read_bytes() if out.exists() else b""
            every.frombytes(data[: len(data) // 8 * 8])
        return every

    def log_tail(self) -> str:
        return "\n".join(log.read_text()[-1500:] for log in self.logs if log.exists())


def duplicates(ids: array[int]) -> int:
    """How many IDs repeat one issued before."""
    return len(ids) - len(set(ids))

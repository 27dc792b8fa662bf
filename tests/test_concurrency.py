"""Snowflake under threads and fork()."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable

import pytest

from snowshard import Snowflake, WorkerIdError


def test_threads_get_unique_increasing_ids() -> None:
    """4 threads sharing a generator get 200k distinct IDs, increasing within each thread."""
    generator = Snowflake(worker=3)
    results: list[list[int]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def work(out: list[int]) -> None:
        barrier.wait()
        for _ in range(50_000):
            out.append(generator.next_id())

    threads = [threading.Thread(target=work, args=(out,)) for out in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [i for out in results for i in out]
    assert len(set(everything)) == 200_000
    for out in results:
        assert all(a < b for a, b in zip(out, out[1:]))


def test_threads_mixing_batches_and_singles_stay_unique() -> None:
    """next_ids and next_id from different threads never hand out the same ID."""
    generator = Snowflake(worker=3)
    singles: list[int] = []
    batches: list[int] = []

    def one() -> None:
        for _ in range(20_000):
            singles.append(generator.next_id())

    def many() -> None:
        for _ in range(20):
            batches.extend(generator.next_ids(1000))

    threads = [threading.Thread(target=one), threading.Thread(target=many)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(singles) | set(batches)) == 40_000


def _in_child(action: Callable[[], int]) -> tuple[str, int]:
    """Fork, run action in the child, return ('ok', value) or ('error', 0) from it."""
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads, 3.12+
        pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read)
        try:
            message = f"ok {action()}"
        except WorkerIdError as exc:
            message = f"error {exc}"
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    kind, _, rest = text.partition(" ")
    return kind, (int(rest) if kind == "ok" else 0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fixed_worker_refuses_to_issue_after_fork() -> None:
    """A child forked from a fixed-worker generator raises WorkerIdError on next_id."""
    generator = Snowflake(worker=5)
    generator.next_id()
    kind, _ = _in_child(generator.next_id)
    assert kind == "error"
    generator.next_id()  # the parent is unaffected


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_provider_worker_is_asked_again_after_fork() -> None:
    """A child re-asks the provider, so its IDs carry its own worker ID."""
    generator = Snowflake(worker=lambda: os.getpid() % 1024)
    parent_worker = generator.layout.parse(generator.next_id()).worker
    kind, child_id = _in_child(generator.next_id)
    assert kind == "ok"
    child_worker = generator.layout.parse(child_id).worker
    assert parent_worker == os.getpid() % 1024
    assert child_worker != parent_worker

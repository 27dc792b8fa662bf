"""Running a check in a forked child of the test process (POSIX only)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX only")


def in_forked_child(check: Callable[[], int], timeout: int = 10) -> int:
    """``check()``'s return value (0-254), run in a child forked now; 255 if it raised, -1
    if the child wrote nothing, and pytest.fail if it had not returned after ``timeout`` s
    (a hang, e.g. on a lock)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        found = 255
        try:
            signal.alarm(timeout)  # a hung child dies of SIGALRM, reported below
            found = check()
        finally:
            os.write(write, bytes([found]))
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        pytest.fail(f"the forked child was killed by signal {os.WTERMSIG(status)} (a hang?)")
    return answer[0] if answer else -1

"""A TCP proxy that adds a fixed one-way delay, to benchmark code against "remote" databases.

    python benchmarks/latency_proxy.py --target 127.0.0.1:5432 --delay-ms 1
    # prints "listening <port>", forwards 127.0.0.1:<port> -> 127.0.0.1:5432 until stdin closes

    with ProxyProcess("127.0.0.1", 5432, delay_ms=1.0) as proxy:   # from a benchmark
        engine = create_engine(url.set(host="127.0.0.1", port=proxy.port))

Every chunk read from either side is written to the other side ``delay`` seconds after it
arrived, so a request/response round trip costs about twice the delay (1 ms each way by
default: ~2 ms per round trip, a server in the same region). How:

* each direction of a connection is a :class:`DelayedPipe`: a FIFO of ``(due, bytes)``
  and at most one timer, armed for the head of the queue. When it fires it writes every
  chunk that is due, in arrival order, and re-arms for the next one. So ordering is kept,
  chunks are never copied or split, and the cost is per chunk, not per byte; bandwidth is
  not limited (the delay is latency only, as on a fast link);
* flow control is passed through: when one side's write buffer fills up
  (``pause_writing``), reading from the other side pauses until it drains;
* a side closing (or failing) is forwarded, delayed like data, as a close of the other.

The loop's timers wake through ``epoll``, whose timeout has 1 ms granularity (rounded up),
so a chunk can leave a little *later* than due, never earlier; benchmarks should print the
round trip they measured through the proxy next to their results.

:class:`ProxyProcess` runs one proxy per process (this file as a script), so its event loop
never competes with the measured code for the GIL, and one connection's timers do not delay
another proxy's. :func:`serve` is the asyncio server itself, to run in a loop of your own.
Standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from collections import deque
from pathlib import Path

__all__ = ["DEFAULT_DELAY_MS", "DelayedPipe", "ProxyProcess", "serve"]

DEFAULT_DELAY_MS = 1.0
"""One-way delay of the proxy, in milliseconds, unless told otherwise."""

SLACK = 1e-6
"""A timer may fire up to the loop's clock resolution early: deliver what is due that soon."""

READY_TIMEOUT = 30.0
"""Seconds a :class:`ProxyProcess` waits for its process to report its port."""


class DelayedPipe:
    """One direction of a proxied connection: chunks leave ``delay`` s after they arrived."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self.loop = loop
        self.delay = delay
        self.pending: deque[tuple[float, bytes | None]] = deque()
        """Chunks not yet written, with the loop time they are due; ``None`` means close."""
        self.sink: asyncio.Transport | None = None
        """Where chunks go: the other side's transport, once it is connected."""
        self.timer: asyncio.TimerHandle | None = None

    def push(self, data: bytes | None) -> None:
        """Queue ``data`` (or, with ``None``, a close) to be delivered ``delay`` s from now."""
        self.pending.append((self.loop.time() + self.delay, data))
        self.arm()

    def attach(self, sink: asyncio.Transport) -> None:
        """Start delivering into ``sink`` (chunks queued meanwhile keep their due times)."""
        self.sink = sink
        self.arm()

    def arm(self) -> None:
        """Set the timer for the head of the queue, unless it is set or nothing can be sent."""
        if self.timer is None and self.sink is not None and self.pending:
            self.timer = self.loop.call_at(self.pending[0][0], self.deliver)

    def deliver(self) -> None:
        """Write every chunk that is due, in order, then re-arm for the next one."""
        self.timer = None
        sink = self.sink
        if sink is None:
            return
        now = self.loop.time() + SLACK
        while self.pending and self.pending[0][0] <= now:
            data = self.pending.popleft()[1]
            if data is None:
                self.pending.clear()
                sink.close()  # close() still sends what is buffered, then the FIN
                return
            sink.write(data)
        self.arm()


class Side(asyncio.Protocol):
    """One socket of a proxied connection (the client's, or the upstream server's)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self.loop = loop
        self.delay = delay
        self.transport: asyncio.Transport | None = None
        self.forward = DelayedPipe(loop, delay)
        """What this socket receives, on its way to the other socket."""
        self.peer: Side | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.forward.push(data)

    def eof_received(self) -> bool | None:
        return None  # close this socket; connection_lost forwards the close

    def connection_lost(self, exc: Exception | None) -> None:
        self.forward.push(None)

    def pause_writing(self) -> None:
        """Our write buffer is full: stop reading from the other socket until it drains."""
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class ClientSide(Side):
    """The accepted socket: on connection, opens the upstream one and joins the two."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, delay: float, target: tuple[str, int],
        tasks: set[asyncio.Task[None]],
    ) -> None:  # fmt: skip
        super().__init__(loop, delay)
        self.target = target
        self.tasks = tasks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        task = self.loop.create_task(self.connect())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def connect(self) -> None:
        host, port = self.target
        try:
            _, upstream = await self.loop.create_connection(
                lambda: Side(self.loop, self.delay), host, port
            )
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        assert self.transport is not None and upstream.transport is not None
        upstream.peer, self.peer = self, upstream
        self.forward.attach(upstream.transport)
        upstream.forward.attach(self.transport)


async def serve(
    target_host: str,
    target_port: int,
    delay_ms: float = DEFAULT_DELAY_MS,
    listen_host: str = "127.0.0.1",
    listen_port: int = 0,
) -> asyncio.Server:
    """Listen on ``listen_host:listen_port`` (0: any free port) and forward to the target.

    Each chunk is delayed ``delay_ms`` milliseconds in each direction. The port chosen is
    ``server.sockets[0].getsockname()[1]``.
    """
    if delay_ms < 0:
        raise ValueError(f"delay_ms must be >= 0, not {delay_ms!r}")
    loop = asyncio.get_running_loop()
    delay = delay_ms / 1000.0
    tasks: set[asyncio.Task[None]] = set()
    return await loop.create_server(
        lambda: ClientSide(loop, delay, (target_host, target_port), tasks),
        listen_host,
        listen_port,
    )


class ProxyProcess:
    """A proxy to ``host:port`` in a child process, listening on ``listen_host:<port>``.

    ``start()`` (or ``with``) returns once it listens; :attr:`port` is its port. The child
    ends when ``close()`` closes its stdin, or when this process dies.
    """

    def __init__(
        self, host: str, port: int, delay_ms: float = DEFAULT_DELAY_MS,
        listen_host: str = "127.0.0.1",
    ) -> None:  # fmt: skip
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, not {delay_ms!r}")
        self.target = (host, port)
        self.delay_ms = delay_ms
        self.listen_host = listen_host
        self.port = 0
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> int:
        """Start the child and wait until it listens; return its port."""
        command = [
            sys.executable, str(Path(__file__).resolve()),
            "--target", f"{self.target[0]}:{self.target[1]}",
            "--delay-ms", repr(self.delay_ms),
            "--listen-host", self.listen_host,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # the child exits (EOF) if it cannot listen
        if not line.startswith("listening "):
            self.close()
            raise RuntimeError(f"latency proxy to {self.target} did not start: {line!r}")
        self.port = int(line.split()[1])
        return self.port

    def close(self) -> None:
        """Stop the child (closing its stdin), waiting for it to exit."""
        process, self.process = self.process, None
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        try:
            process.wait(timeout=READY_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> ProxyProcess:  # noqa: PYI034 - final in practice
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _serve_until_stdin_closes(args: argparse.Namespace) -> None:
    host, _, port = args.target.rpartition(":")
    server = await serve(host, int(port), args.delay_ms, args.listen_host, args.listen_port)
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.buffer.read)  # returns at EOF
    server.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--target", required=True, help="host:port to forward to")
    parser.add_argument("--delay-ms", type=float, default=DEFAULT_DELAY_MS,
                        help=f"one-way delay in ms (default {DEFAULT_DELAY_MS})")  # fmt: skip
    parser.add_argument("--listen-host", default="127.0.0.1")
    parser.add_argument("--listen-port", type=int, default=0, help="0: any free port")
    args = parser.parse_args(argv)
    if args.delay_ms < 0:
        parser.error(f"--delay-ms must be >= 0, not {args.delay_ms}")
    asyncio.run(_serve_until_stdin_closes(args))


if __name__ == "__main__":
    main()

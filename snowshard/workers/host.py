"""The default worker ID: low bits of the host's IPv4 address and of the process ID.

With a 10-bit worker field the ID is ``(ip & 31) << 5 | (pid & 31)``: different hosts on
one /27 and different processes on one host mostly differ. Mostly is not always: when IDs
must be unique for certain, use a lease from :mod:`snowshard.workers`.
"""

from __future__ import annotations

import ipaddress
import os
import socket

from snowshard.layout import Layout, check_layout

__all__ = ["HostWorker", "host_ipv4"]


def host_ipv4() -> int:
    """This host's IPv4 address as an int: the first non-loopback address its hostname
    resolves to, else the first loopback one, else 127.0.0.1. Sends no traffic."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
    except OSError:
        infos = []
    addresses = [ipaddress.IPv4Address(info[4][0]) for info in infos]
    for address in addresses:
        if not address.is_loopback:
            return int(address)
    return int(addresses[0]) if addresses else int(ipaddress.IPv4Address("127.0.0.1"))


class HostWorker:
    """A worker-ID provider from the host address and the current process ID.

    Called again after ``fork()``, it gives the child its own ID (its pid differs).
    """

    def __init__(self, layout: Layout, *, ipv4: int | None = None) -> None:
        layout = check_layout(layout)
        self.bits = layout.worker_bits
        self.pid_bits = self.bits // 2
        self.ip_bits = self.bits - self.pid_bits
        self._ipv4 = ipv4

    def __call__(self) -> int:
        ip = self._ipv4 if self._ipv4 is not None else host_ipv4()
        ip_part = ip & ((1 << self.ip_bits) - 1)
        pid_part = os.getpid() & ((1 << self.pid_bits) - 1)
        return (ip_part << self.pid_bits) | pid_part

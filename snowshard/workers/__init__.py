"""Worker ID providers: where a generator's worker ID comes from."""

from __future__ import annotations

from snowshard.workers.host import HostWorker, host_ipv4

__all__ = ["HostWorker", "host_ipv4"]

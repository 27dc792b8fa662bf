"""Kept so revisions generated before :mod:`snowshard.spec` existed still import.

New code imports :class:`~snowshard.spec.ShardSpec` from :mod:`snowshard.spec`, which needs
no third-party package.
"""

from __future__ import annotations

from snowshard.spec import DEFAULT_DATABASE, ShardConfigError, ShardInfo, ShardSpec

__all__ = ["DEFAULT_DATABASE", "ShardConfigError", "ShardInfo", "ShardSpec"]

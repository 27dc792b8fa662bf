"""Operations on live databases: :func:`recover` in-doubt two-phase commits.

``snowshard txn recover URL...`` runs it from the command line.
"""

from __future__ import annotations

from snowshard.operations.recovery import RecoveryAction, RecoveryReport, recover

__all__ = ["RecoveryAction", "RecoveryReport", "recover"]

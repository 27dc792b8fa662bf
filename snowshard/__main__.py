"""``python -m snowshard ...`` runs the ``snowshard`` command."""

from __future__ import annotations

from snowshard.cli import entrypoint

if __name__ == "__main__":
    entrypoint()

"""``python -m snowshard ...`` runs the ``snowshard`` command (the ``cli`` extra).

Without that extra it prints one line naming ``pip install "snowshard[cli]"`` and exits 1.
"""

from __future__ import annotations

from snowshard.cli import entrypoint

if __name__ == "__main__":
    entrypoint()

"""The sharded-table contract: importable without SQLAlchemy's ORM layer, and at its old path."""

from __future__ import annotations

import subprocess
import sys


def test_spec_module_loads_no_third_party_package() -> None:
    """Importing snowshard.spec loads neither SQLAlchemy nor snowshard.sharding."""
    code = (
        "import sys, snowshard.spec; "
        "print(sorted(m for m in ('sqlalchemy', 'snowshard.sharding', 'alembic') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_old_import_path_names_the_same_class() -> None:
    """Revisions generated with ``from snowshard.sharding.spec import ShardSpec`` still work."""
    from snowshard import spec
    from snowshard.sharding import spec as old

    assert old.ShardSpec is spec.ShardSpec
    assert old.ShardInfo is spec.ShardInfo
    assert old.ShardConfigError is spec.ShardConfigError

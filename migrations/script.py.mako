<%!
import re

%>"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}

"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}

# revision identifiers, used by Alembic.
revision: str = ${repr(up_revision)}
down_revision: str | Sequence[str] | None = ${repr(down_revision)}
branch_labels: str | Sequence[str] | None = ${repr(branch_labels)}
depends_on: str | Sequence[str] | None = ${repr(depends_on)}


def upgrade(engine_name: str) -> None:
    """Upgrade the database ``engine_name``."""
    globals()[f"upgrade_{engine_name}"]()


def downgrade(engine_name: str) -> None:
    """Downgrade the database ``engine_name``."""
    globals()[f"downgrade_{engine_name}"]()

<%
    db_names = config.get_main_option("databases")
%>

## an upgrade_<key>() / downgrade_<key>() pair for each database in alembic.ini; sharded
## operations (op.*_sharded_*) change the physical tables that live in that database.

% for db_name in re.split(r',\s*', db_names):

def upgrade_${db_name}() -> None:
    """Upgrade the ${db_name} database."""
    ${context.get("%s_upgrades" % db_name, "pass")}


def downgrade_${db_name}() -> None:
    """Downgrade the ${db_name} database."""
    ${context.get("%s_downgrades" % db_name, "pass")}

% endfor

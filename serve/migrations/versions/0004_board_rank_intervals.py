# SPDX-License-Identifier: MIT
"""Issue #26 item 7: rank intervals on the served board. Each board row keeps its bootstrap replicates of CLL and
accuracy (``cll_replicates``, ``accuracy_replicates``: B little-endian float64 each), computed once from its
result's per-sample statistics, with the resampling unit and size they were drawn for (``sample_unit``,
``sample_n``), the settings they were drawn under (``stats_key``) and a version for the servers' caches
(``stats_at``); ``board_meta.intervals`` records the last rank-interval computation. Rows of an older database get
their replicates from their stored results at the next server start (``serve/board.py``).

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("board_rows") as batch:
        batch.add_column(sa.Column("stats_key", sa.String(64)))
        batch.add_column(sa.Column("stats_at", sa.Integer))
        batch.add_column(sa.Column("sample_unit", sa.Text))
        batch.add_column(sa.Column("sample_n", sa.Integer))
        batch.add_column(sa.Column("cll_replicates", sa.LargeBinary))
        batch.add_column(sa.Column("accuracy_replicates", sa.LargeBinary))
    with op.batch_alter_table("board_meta") as batch:
        batch.add_column(sa.Column("intervals", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("board_meta") as batch:
        batch.drop_column("intervals")
    with op.batch_alter_table("board_rows") as batch:
        for name in ("accuracy_replicates", "cll_replicates", "sample_n", "sample_unit", "stats_at", "stats_key"):
            batch.drop_column(name)

# SPDX-License-Identifier: MIT
"""Issue #25: claims carry a lease (``lease_owner``, ``lease_expires``) and a rejection the service decides itself
has its ``findings``; teams remember their last claim (round-robin scheduling); uploads in progress are
``reservations`` counted against the quotas; the board is materialised in ``board_rows`` (one per scored
submission, with a JSON ``extras`` column for values computed across rows) and ``board_meta`` (one row). Scored
submissions of an older database get their board rows at the next server start (``serve/board.py``).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.add_column(sa.Column("last_claimed", sa.DateTime(timezone=True)))
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(64)))
        batch.add_column(sa.Column("lease_expires", sa.DateTime(timezone=True)))
        batch.add_column(sa.Column("findings", sa.Text))
    op.create_table(
        "reservations",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("team_id", sa.Integer, sa.ForeignKey("teams.id"), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_reservations_team_id", "reservations", ["team_id"])
    op.create_table(
        "board_rows",
        sa.Column("submission_id", sa.String(36), sa.ForeignKey("submissions.id"), primary_key=True),
        sa.Column("entry", sa.Text, nullable=False),
        sa.Column("ranked", sa.Boolean),
        sa.Column("cll", sa.Float),
        sa.Column("accuracy", sa.Float),
        sa.Column("position", sa.Integer),
        sa.Column("rank", sa.Integer),
        sa.Column("row", sa.Text),
        sa.Column("cells", sa.Text),
        sa.Column("extras", sa.Text),
    )
    op.create_index("ix_board_rows_position", "board_rows", ["position"])
    meta = op.create_table(
        "board_meta",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("changes", sa.Integer, nullable=False),
        sa.Column("built_from", sa.Integer),
        sa.Column("columns", sa.Text),
        sa.Column("column_state", sa.Text),
        sa.Column("config", sa.Text),
        sa.Column("renderer", sa.String(64)),
        sa.Column("generated", sa.DateTime(timezone=True)),
    )
    op.bulk_insert(meta, [{"id": 1, "changes": 0}])


def downgrade() -> None:
    op.drop_table("board_meta")
    op.drop_index("ix_board_rows_position", table_name="board_rows")
    op.drop_table("board_rows")
    op.drop_index("ix_reservations_team_id", table_name="reservations")
    op.drop_table("reservations")
    with op.batch_alter_table("submissions") as batch:
        batch.drop_column("findings")
        batch.drop_column("lease_expires")
        batch.drop_column("lease_owner")
    with op.batch_alter_table("teams") as batch:
        batch.drop_column("last_claimed")

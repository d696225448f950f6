# SPDX-License-Identifier: MIT
"""Indexes for the two queries every upload and every idle worker runs: the queue's ``status = 'queued' ORDER BY
created`` (``Database.claim_next``) and a team's uploads in the last 24 hours (``Database.count_since``). The
composite indexes replace the single-column ones on ``status`` and ``team_id``, which they cover.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_submissions_status_created", "submissions", ["status", "created"])
    op.create_index("ix_submissions_team_created", "submissions", ["team_id", "created"])
    op.drop_index("ix_submissions_status", table_name="submissions")
    op.drop_index("ix_submissions_team_id", table_name="submissions")


def downgrade() -> None:
    op.create_index("ix_submissions_team_id", "submissions", ["team_id"])
    op.create_index("ix_submissions_status", "submissions", ["status"])
    op.drop_index("ix_submissions_team_created", table_name="submissions")
    op.drop_index("ix_submissions_status_created", table_name="submissions")

# SPDX-License-Identifier: MIT
"""Alembic environment of ``ubench serve``: always run programmatically by ``serve.db.upgrade_to_head`` on a
connection it passes in ``config.attributes["connection"]`` (inside its transaction, under its lock)."""

from alembic import context

from ubench.serve.db import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True,
                  transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()

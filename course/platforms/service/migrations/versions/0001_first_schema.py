"""The service's first schema: students, instructors, attempts, settings.

The same tables and columns from the service's first cut (6c8a639) to b99931e, made then by `create_all`. Frozen
here: a revision never imports the live table definitions of store.py, which move on with later revisions.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "students",
        sa.Column("student_id", sa.String(100), primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("lms", sa.Text, nullable=False),
    )
    op.create_table(
        "instructors",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    )
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("student_id", sa.String(100), sa.ForeignKey("students.student_id"), nullable=False, index=True),
        sa.Column("assignment", sa.String(100), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("submitted_at", sa.DateTime, nullable=False),
        sa.Column("status", sa.String(20), nullable=False, index=True),
        sa.Column("score", sa.Float),
        sa.Column("raw_score", sa.Float),
        sa.Column("late_penalty", sa.Float),
        sa.Column("max_score", sa.Float),
        sa.Column("integrity", sa.Text),
        sa.Column("graded_at", sa.DateTime),
        sa.Column("seconds", sa.Float),
        sa.Column("results_written", sa.Integer, nullable=False),
        # The large values last (store.py says why).
        sa.Column("feedback", sa.Text),
        sa.Column("notebook", sa.LargeBinary, nullable=False),
        sa.UniqueConstraint("student_id", "assignment", "number"),
    )
    op.create_table(
        "settings",
        sa.Column("name", sa.String(50), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )


def downgrade() -> None:
    for table in ("settings", "attempts", "instructors", "students"):
        op.drop_table(table)

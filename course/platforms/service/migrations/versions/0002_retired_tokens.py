"""Retired tokens, kept by their hash so that their links can say why they stopped (b5172c4: serve tokens
--rotate/--revoke). Before this revision, `create_all` added the table to a database made before it.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "retired_tokens",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("student_id", sa.String(100), sa.ForeignKey("students.student_id"), nullable=True),
        sa.Column("reason", sa.String(20), nullable=False),
        sa.Column("retired_at", sa.DateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("retired_tokens")

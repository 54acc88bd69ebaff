"""The shared queue's tables (course/platforms/service/shared.py: claims, grading_turns).

Before this revision they were made outside any revision, by `create_all` whenever shared.py had been imported (so
a database made by `serve` has them, one made by `serve tokens` alone does not): made here only where missing, so
that every database made before reaches the same schema. (The shared queue's rule of one attempt in grading per
student, a partial unique index on PostgreSQL, is made by the shared queue when it starts, as before: a Store
alone may claim two attempts of one student.)

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "claims",
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), primary_key=True),
        sa.Column("owner", sa.Integer, nullable=False),
        sa.Column("claimed_at", sa.DateTime, nullable=False),
        if_not_exists=True,
    )
    op.create_index("ix_claims_owner", "claims", ["owner"], if_not_exists=True)
    op.create_table(
        "grading_turns",
        sa.Column("assignment", sa.String(100), primary_key=True),
        sa.Column("state", sa.Text, nullable=False),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("ix_claims_owner", "claims")
    op.drop_table("grading_turns")
    op.drop_table("claims")

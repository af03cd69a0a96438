"""The layout each trial ran under, and the layouts behind each observation.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

``trials.layout``: the id of what the trial varied that its commit does not control (worktree slot,
environment padding, PYTHONHASHSEED: ``perfbisect.layout``), e.g. "s2-e1733-h40211"; NULL for trials
stored before layouts were recorded. ``observations.layout``: the ids of the trials behind an
observation ("+"-joined for a ratio metric's two modes), so a resumed bisection hands the search the
layouts its first part ran under.
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: Union[str, Sequence[str], None] = "0003"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("layout", sa.String(length=64), nullable=True))
    with op.batch_alter_table("observations") as batch:
        batch.add_column(sa.Column("layout", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("observations") as batch:
        batch.drop_column("layout")
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("layout")

"""Runs found to be warm-up after they were stored as measured.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

``runs.detected_warmup``: with ``workload.detect_warmup``, leading measured runs slower than the
later ones beyond their spread are re-marked as warm-up (``warmup`` set too, so no statistic uses
them) and replaced by more runs; this says which ones, so the log and the report can count them.
Existing runs read as not detected.
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: Union[str, Sequence[str], None] = "0004"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("detected_warmup", sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("detected_warmup")

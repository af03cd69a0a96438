"""Learned noise per host/mode/workload, and why an observation was excluded.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

``noise_estimates``: the between-trial noise a calibration or a finished bisection measured, so the
next bisection on the same host starts from it instead of the prior. ``observations.flag``: a trial
the runner flagged (throttled by an external cause, contended) is kept but excluded from the search.
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: Union[str, Sequence[str], None] = "0001"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("observations") as batch:
        batch.add_column(sa.Column("flag", sa.Text(), nullable=True))
    op.create_table(
        "noise_estimates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("mode", sa.String(length=64), nullable=False),
        sa.Column("mode_hash", sa.String(length=64), nullable=False),
        sa.Column("workload_hash", sa.String(length=64), nullable=False),
        sa.Column("sigma_b", sa.Float(), nullable=False),
        sa.Column("dof", sa.Float(), nullable=False),
        sa.Column("sigma_w", sa.Float(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_noise_estimates")),
    )
    op.create_index(
        op.f("ix_noise_estimates_mode_workload_hash"), "noise_estimates", ["mode", "workload_hash"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_noise_estimates_mode_workload_hash"), table_name="noise_estimates")
    op.drop_table("noise_estimates")
    with op.batch_alter_table("observations") as batch:
        batch.drop_column("flag")

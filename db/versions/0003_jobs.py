"""Trials run as cluster jobs: the job id and node of each trial, and the jobs themselves.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

``trials.job_id`` / ``trials.node``: the Slurm job and node that ran a trial (NULL: run locally).
``jobs``: one row per submitted observation (bisection, slot, attempt, commit, job id, states, node,
times, the job's result or error), so that `perfbisect resume` re-attaches to jobs still queued or
running instead of submitting them again, and a job the cluster lost is retried, never blamed.
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: Union[str, Sequence[str], None] = "0002"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("job_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("node", sa.String(length=255), nullable=True))
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("bisection_id", sa.Integer(), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("commit_sha", sa.String(length=64), nullable=False),
        sa.Column("executor", sa.String(length=16), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("job_name", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("slurm_state", sa.String(length=32), nullable=True),
        sa.Column("node", sa.String(length=255), nullable=True),
        sa.Column("submitted_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("result", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("observation_seq", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["bisection_id"], ["bisections.id"], name=op.f("fk_jobs_bisection_id_bisections")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index(op.f("ix_jobs_bisection_id_state"), "jobs", ["bisection_id", "state"], unique=False)
    op.create_index(op.f("ix_jobs_job_id"), "jobs", ["job_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_jobs_job_id"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_bisection_id_state"), table_name="jobs")
    op.drop_table("jobs")
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("node")
        batch.drop_column("job_id")

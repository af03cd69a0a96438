"""Initial results schema: trials, runs, bisections, observations, comparisons.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

A migration is a frozen snapshot: it spells its tables out instead of importing perfbisect's
models, so that later model changes never rewrite history.
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: Union[str, Sequence[str], None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "bisections",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("good", sa.String(length=64), nullable=False),
        sa.Column("bad", sa.String(length=64), nullable=False),
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("commits", sa.JSON(), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("verdict", sa.String(length=16), nullable=True),
        sa.Column("culprit", sa.String(length=64), nullable=True),
        sa.Column("outcome", sa.JSON(none_as_null=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bisections")),
    )
    op.create_index(op.f("ix_bisections_status_started_at"), "bisections", ["status", "started_at"])

    op.create_table(
        "comparisons",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("a", sa.String(length=64), nullable=False),
        sa.Column("b", sa.String(length=64), nullable=False),
        sa.Column("mode", sa.String(length=64), nullable=False),
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("effect_pct", sa.Float(), nullable=False),
        sa.Column("ci_low_pct", sa.Float(), nullable=False),
        sa.Column("ci_high_pct", sa.Float(), nullable=False),
        sa.Column("comparison", sa.JSON(), nullable=False),
        sa.Column("trial_ids_a", sa.JSON(), nullable=False),
        sa.Column("trial_ids_b", sa.JSON(), nullable=False),
        sa.Column("bisection_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["bisection_id"],
            ["bisections.id"],
            name=op.f("fk_comparisons_bisection_id_bisections"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_comparisons")),
    )
    op.create_index(op.f("ix_comparisons_a_b_mode"), "comparisons", ["a", "b", "mode"])
    op.create_index(op.f("ix_comparisons_created_at"), "comparisons", ["created_at"])

    op.create_table(
        "observations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("bisection_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("commit_sha", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("trial_ids", sa.JSON(), nullable=False),
        sa.Column("covariates", sa.JSON(), nullable=False),
        sa.Column("recorded_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["bisection_id"],
            ["bisections.id"],
            name=op.f("fk_observations_bisection_id_bisections"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_observations")),
        sa.UniqueConstraint("bisection_id", "seq", name=op.f("uq_observations_bisection_id_seq")),
    )

    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("commit_sha", sa.String(length=64), nullable=False),
        sa.Column("patch_hash", sa.String(length=64), nullable=False),
        sa.Column("build_hash", sa.String(length=64), nullable=False),
        sa.Column("mode", sa.String(length=64), nullable=False),
        sa.Column("mode_hash", sa.String(length=64), nullable=False),
        sa.Column("workload_hash", sa.String(length=64), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("purpose", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("summary", sa.Float(), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("log_path", sa.Text(), nullable=True),
        sa.Column("system", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("system_samples", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("env_checks", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("server_info", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("versions", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("bisection_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["bisection_id"],
            ["bisections.id"],
            name=op.f("fk_trials_bisection_id_bisections"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trials")),
    )
    op.create_index(op.f("ix_trials_bisection_id"), "trials", ["bisection_id"])
    op.create_index(op.f("ix_trials_commit_sha_mode"), "trials", ["commit_sha", "mode"])
    op.create_index(
        op.f("ix_trials_host_mode_mode_hash_workload_hash_status"),
        "trials",
        ["host", "mode", "mode_hash", "workload_hash", "status"],
    )
    op.create_index(op.f("ix_trials_started_at"), "trials", ["started_at"])
    op.create_index(op.f("ix_trials_status"), "trials", ["status"])

    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("warmup", sa.Boolean(), nullable=False),
        sa.Column("requested_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("ttft_s", sa.Float(), nullable=True),
        sa.Column("decode_tok_s", sa.Float(), nullable=True),
        sa.Column("e2e_tok_s", sa.Float(), nullable=True),
        sa.Column("itl_p50_ms", sa.Float(), nullable=True),
        sa.Column("itl_p99_ms", sa.Float(), nullable=True),
        sa.Column("spec_verify_ct", sa.Integer(), nullable=True),
        sa.Column("spec_accept_length", sa.Float(), nullable=True),
        sa.Column("spec_accept_rate", sa.Float(), nullable=True),
        sa.Column("server_decode_tok_s", sa.Float(), nullable=True),
        sa.Column("metric_value", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("recorded_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], name=op.f("fk_runs_trial_id_trials")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    op.create_index(op.f("ix_runs_trial_id"), "runs", ["trial_id"])


def downgrade() -> None:
    # Dropping a table drops its indexes with it.
    for table in ("runs", "trials", "observations", "comparisons", "bisections"):
        op.drop_table(table)

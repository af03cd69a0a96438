"""The metric's description stored with each bisection and comparison.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

``bisections.metric_info`` and ``comparisons.metric_info``: ``metrics.Metric.as_json()`` (name, label,
unit, which way is better) of the metric the bisection or comparison measured, so that `report` and
`log` print its own unit and direction without the config that produced it (a seconds metric was
called "decode throughput … tok/s" by a report made without `-c`). Existing rows stay NULL and are
read as before: the config's description, else decode tok/s.
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: Union[str, Sequence[str], None] = "0006"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    for table in ("bisections", "comparisons"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("metric_info", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    for table in ("bisections", "comparisons"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("metric_info")

"""What a bisection's search started from, and each observation's node and the decision that asked for it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

``bisections.search_start``: the noise model the search started from (σ, dof, source), the endpoint
history it was given and the metric's direction, so a report replays the search the bisection ran,
not one started from today's configured prior. ``observations.host``: the node that measured it (what
the search was told; NULL = the one local host). ``observations.decision``: the search's decision
that asked for this observation (commit, phase, reason), so a report's replay can be checked against
the live run. Rows stored before this migration read as not recorded (NULL).
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: Union[str, Sequence[str], None] = "0005"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("bisections") as batch:
        batch.add_column(sa.Column("search_start", sa.JSON(none_as_null=True), nullable=True))
    with op.batch_alter_table("observations") as batch:
        batch.add_column(sa.Column("host", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("decision", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("observations") as batch:
        batch.drop_column("decision")
        batch.drop_column("host")
    with op.batch_alter_table("bisections") as batch:
        batch.drop_column("search_start")

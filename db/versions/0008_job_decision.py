"""The decision that asked for each cluster job, with what the search knew when it asked.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04

``jobs.decision``: the search's decision that submitted the job (commit, phase, reason) and what it was
decided on — how many observations were stored (``after``), the measurements in flight (``pending``:
commit and node) and the node it was asked for (``host``). The job's observation carries it on
(``observations.decision``), so the report of a bisection whose trials ran as Slurm jobs replays each
decision as it was made and checks it, like a local one's. Rows stored before this migration read as not
recorded (NULL).
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: Union[str, Sequence[str], None] = "0007"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("decision", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("decision")

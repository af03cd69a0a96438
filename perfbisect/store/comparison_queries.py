"""Comparisons of two commits (``perfbisect compare``, a bisection's endpoint check) in the results database.

The functions take a ``Session`` the caller owns and return ``records.ComparisonRecord`` values, like
every query module of the store.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..model import Comparison, Verdict
from . import codec
from .codec import json_part
from .records import ComparisonRecord
from .schema import ComparisonRow


def insert_comparison(
    session: Session,
    *,
    a: str,
    b: str,
    mode: str,
    comparison: Comparison,
    metric: str = "decode_tok_s",
    trial_ids_a: Iterable[int] = (),
    trial_ids_b: Iterable[int] = (),
    bisection_id: int | None = None,
    created_at: float | None = None,
    metric_info: dict[str, Any] | None = None,
) -> int:
    """Store one comparison and return its id."""
    row = ComparisonRow(
        a=a,
        b=b,
        mode=mode,
        metric=metric,
        verdict=Verdict(comparison.verdict).value,
        effect_pct=comparison.effect_pct,
        ci_low_pct=comparison.ci_low_pct,
        ci_high_pct=comparison.ci_high_pct,
        comparison=json_part("comparison", comparison),
        trial_ids_a=[int(t) for t in trial_ids_a],
        trial_ids_b=[int(t) for t in trial_ids_b],
        bisection_id=bisection_id,
        created_at=time.time() if created_at is None else created_at,
        metric_info=metric_info,
    )
    session.add(row)
    session.flush()
    return row.id


def list_comparisons(
    session: Session, limit: int = 20, *, bisection_id: int | None = None
) -> list[ComparisonRecord]:
    """The most recent comparisons, newest first."""
    query = select(ComparisonRow)
    if bisection_id is not None:
        query = query.where(ComparisonRow.bisection_id == bisection_id)
    query = query.order_by(ComparisonRow.created_at.desc(), ComparisonRow.id.desc()).limit(limit)
    return [
        ComparisonRecord(
            id=row.id,
            a=row.a,
            b=row.b,
            mode=row.mode,
            metric=row.metric,
            comparison=codec.load(Comparison, row.comparison),
            trial_ids_a=tuple(row.trial_ids_a),
            trial_ids_b=tuple(row.trial_ids_b),
            bisection_id=row.bisection_id,
            created_at=row.created_at,
            metric_info=row.metric_info,
        )
        for row in session.scalars(query)
    ]

"""Noise levels measured on a host, kept for later bisections and calibrations of the same workload.

``perfbisect calibrate`` and finished bisections store a ``records.NoiseEstimate``
(``perfbisect.app.calibration.keep_noise``); the next command on that host starts from it
(``noise_figures.starting_noise``). The functions take a ``Session`` the caller owns, like every query
module of the store.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from .records import NoiseEstimate
from .schema import NoiseEstimateRow


def insert_noise_estimate(session: Session, estimate: NoiseEstimate) -> None:
    """Keep a measured noise level for later bisections on the same host."""
    session.add(
        NoiseEstimateRow(
            host=estimate.host, mode=estimate.mode, mode_hash=estimate.mode_hash,
            workload_hash=estimate.workload_hash, sigma_b=estimate.sigma_b, dof=estimate.dof,
            sigma_w=estimate.sigma_w, source=estimate.source, created_at=estimate.created_at,
        )
    )
    session.flush()


def load_noise_estimates(session: Session, mode: str, workload_hash: str) -> list[NoiseEstimate]:
    """Every stored estimate for (mode, workload) on any host, newest first (the caller picks the host)."""
    rows = session.scalars(
        select(NoiseEstimateRow)
        .where(NoiseEstimateRow.mode == mode, NoiseEstimateRow.workload_hash == workload_hash)
        .order_by(NoiseEstimateRow.created_at.desc(), NoiseEstimateRow.id.desc())
    )
    return [
        NoiseEstimate(r.host, r.mode, r.mode_hash, r.workload_hash, r.sigma_b, r.dof, r.sigma_w, r.source, r.created_at)
        for r in rows
    ]

"""SQLAlchemy 2.0 models of the results database.

The schema is created and changed only by the Alembic migrations in ``db/versions``; a test proves
that ``upgrade head`` from an empty file yields exactly what these models declare. Change a model,
then add a migration (``python -m perfbisect.store.migrations revision "why"``).

Times are unix seconds (REAL), as in ``perfbisect.model``: an 8-byte float round-trips exactly.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, deferred, mapped_column, relationship

# Deterministic constraint names: SQLite batch migrations recreate tables and must find them by name.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Trial and bisection states as stored. A trial is "running" from begin_trial until finish_trial;
# one left "running" by a dead process is what recover_interrupted() turns into "failed".
TRIAL_RUNNING = "running"
BISECTION_RUNNING = "running"
BISECTION_DONE = "done"
BISECTION_INTERRUPTED = "interrupted"

# SQL NULL (not the JSON text 'null') for absent JSON values, so "IS NULL" means "not recorded".
NullableJSON = JSON(none_as_null=True)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class BisectionRow(Base):
    """One `perfbisect run good..bad` search; its observations replay the policy's whole state."""

    __tablename__ = "bisections"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    good: Mapped[str] = mapped_column(String(64))
    bad: Mapped[str] = mapped_column(String(64))
    metric: Mapped[str] = mapped_column(String(64))
    config_hash: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(Text)  # the target repository's path
    commits: Mapped[list[str]] = mapped_column(JSON)  # the candidate list, oldest first
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    owner: Mapped[str] = mapped_column(String(255))  # "host:pid" of the process running it
    started_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    verdict: Mapped[str | None] = mapped_column(String(16), nullable=True)
    culprit: Mapped[str | None] = mapped_column(String(64), nullable=True)
    outcome: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON, nullable=True)
    # The metric's description (metrics.Metric.as_json: name, unit, direction) when it started;
    # NULL: stored before migration 0007, read as the config (or decode tok/s) describes it.
    metric_info: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON, nullable=True)
    # What the search started from (noise σ/dof/source, endpoint history, direction): migration 0006.
    search_start: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON, nullable=True)

    observations: Mapped[list[ObservationRow]] = relationship(
        back_populates="bisection", order_by="ObservationRow.seq"
    )

    __table_args__ = (Index(None, "status", "started_at"),)


class TrialRow(Base):
    """One server session for (commit, mode)."""

    __tablename__ = "trials"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    commit_sha: Mapped[str] = mapped_column(String(64))
    patch_hash: Mapped[str] = mapped_column(String(64))
    build_hash: Mapped[str] = mapped_column(String(64))
    mode: Mapped[str] = mapped_column(String(64))
    mode_hash: Mapped[str] = mapped_column(String(64))
    workload_hash: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(255))
    purpose: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    owner: Mapped[str] = mapped_column(String(255))  # "host:pid": lets recovery skip live trials
    summary: Mapped[float | None] = mapped_column(Float, nullable=True)  # log-scale trial summary
    started_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    log_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    system: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON, nullable=True)
    # The sampler's compact time series can approach 1 MB: deferred so that listing trials for the
    # noise model never drags it in; only a report of one trial asks for it.
    system_samples: Mapped[dict[str, Any] | None] = deferred(
        mapped_column(NullableJSON, nullable=True)
    )
    env_checks: Mapped[list[Any] | None] = mapped_column(NullableJSON, nullable=True)
    server_info: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON, nullable=True)
    versions: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON, nullable=True)
    bisection_id: Mapped[int | None] = mapped_column(ForeignKey("bisections.id"), nullable=True)
    # Where an executor ran it: the Slurm job id and node name (None: run by perfbisect itself, here).
    job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    node: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # The layout it ran under (perfbisect.layout id: "s2-e1733-h40211"); NULL: stored before layouts.
    layout: Mapped[str | None] = mapped_column(String(64), nullable=True)

    runs: Mapped[list[RunRow]] = relationship(back_populates="trial", order_by="RunRow.id")

    __table_args__ = (
        Index(None, "commit_sha", "mode"),
        Index(None, "host", "mode", "mode_hash", "workload_hash", "status"),
        Index(None, "status"),
        Index(None, "started_at"),
        Index(None, "bisection_id"),
    )


class RunRow(Base):
    """One measured (or warm-up) request of a trial; committed the moment it lands."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # insertion order = run order
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id"))
    idx: Mapped[int] = mapped_column(Integer)
    warmup: Mapped[bool] = mapped_column(Boolean)
    requested_tokens: Mapped[int] = mapped_column(Integer)
    output_tokens: Mapped[int] = mapped_column(Integer)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    ttft_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    decode_tok_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    e2e_tok_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    itl_p50_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    itl_p99_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    spec_verify_ct: Mapped[int | None] = mapped_column(Integer, nullable=True)
    spec_accept_length: Mapped[float | None] = mapped_column(Float, nullable=True)
    spec_accept_rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    server_decode_tok_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    metric_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    recorded_at: Mapped[float] = mapped_column(Float)
    # Stored as measured, then found to be warm-up (warmup is set too): migration 0005.
    detected_warmup: Mapped[bool] = mapped_column(Boolean, server_default=false())

    trial: Mapped[TrialRow] = relationship(back_populates="runs")

    __table_args__ = (Index(None, "trial_id"),)


class ObservationRow(Base):
    """One answer the search policy got: (commit, log summary or None when untestable)."""

    __tablename__ = "observations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    bisection_id: Mapped[int] = mapped_column(ForeignKey("bisections.id"))
    seq: Mapped[int] = mapped_column(Integer)
    commit_sha: Mapped[str] = mapped_column(String(64))
    value: Mapped[float | None] = mapped_column(Float, nullable=True)
    trial_ids: Mapped[list[int]] = mapped_column(JSON)
    covariates: Mapped[dict[str, float]] = mapped_column(JSON)
    recorded_at: Mapped[float] = mapped_column(Float)
    flag: Mapped[str | None] = mapped_column(Text, nullable=True)  # why it is excluded, if it is
    # The layout ids of its trials ("+"-joined for a ratio metric); NULL: unrecorded.
    layout: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # The node the search was told measured it (NULL: the one local host), and the decision that asked
    # for it (commit, phase, reason; NULL: marked untestable up front, or stored before migration 0006).
    host: Mapped[str | None] = mapped_column(String(255), nullable=True)
    decision: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON, nullable=True)

    bisection: Mapped[BisectionRow] = relationship(back_populates="observations")

    # The replay order is seq; a duplicate seq would make the replay ambiguous.
    __table_args__ = (UniqueConstraint("bisection_id", "seq"),)


class NoiseEstimateRow(Base):
    """Between-trial noise measured on one host for one mode and workload (calibrate, bisections)."""

    __tablename__ = "noise_estimates"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    mode: Mapped[str] = mapped_column(String(64))
    mode_hash: Mapped[str] = mapped_column(String(64))
    workload_hash: Mapped[str] = mapped_column(String(64))
    sigma_b: Mapped[float] = mapped_column(Float)  # log scale
    dof: Mapped[float] = mapped_column(Float)
    sigma_w: Mapped[float | None] = mapped_column(Float, nullable=True)
    source: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index(None, "mode", "workload_hash"),)


class JobRow(Base):
    """One observation's trials submitted to a cluster as a job (``perfbisect.executors.slurm``).

    The controller owns ``state`` ("submitted" while in flight, "observed" once its result is an
    observation, "lost" when the cluster ended it without a result), ``slurm_state`` and
    ``observation_seq``; the job itself writes ``result`` (and sets ``state`` = "result") or ``error``.
    """

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    bisection_id: Mapped[int] = mapped_column(ForeignKey("bisections.id"))
    slot: Mapped[int] = mapped_column(Integer)  # the n-th measurement the controller asked for
    attempt: Mapped[int] = mapped_column(Integer)  # 1, then 2, ... when the cluster lost the job
    commit_sha: Mapped[str] = mapped_column(String(64))
    executor: Mapped[str] = mapped_column(String(16))  # "slurm"
    job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)  # None until sbatch answered
    job_name: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16))
    slurm_state: Mapped[str | None] = mapped_column(String(32), nullable=True)
    node: Mapped[str | None] = mapped_column(String(255), nullable=True)
    submitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    result: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    observation_seq: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The decision that submitted it, with what it was decided on (executors.loop.batch_decision; NULL: a
    # which-path job, or stored before migration 0008). Its observation carries it on.
    decision: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON, nullable=True)

    __table_args__ = (Index(None, "bisection_id", "state"), Index(None, "job_id"))


class ComparisonRow(Base):
    """One A-vs-B comparison (`perfbisect compare`, endpoint and culprit checks)."""

    __tablename__ = "comparisons"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    a: Mapped[str] = mapped_column(String(64))
    b: Mapped[str] = mapped_column(String(64))
    mode: Mapped[str] = mapped_column(String(64))
    metric: Mapped[str] = mapped_column(String(64))
    verdict: Mapped[str] = mapped_column(String(16))
    effect_pct: Mapped[float] = mapped_column(Float)
    ci_low_pct: Mapped[float] = mapped_column(Float)
    ci_high_pct: Mapped[float] = mapped_column(Float)
    comparison: Mapped[dict[str, Any]] = mapped_column(JSON)  # the whole model.Comparison
    trial_ids_a: Mapped[list[int]] = mapped_column(JSON)
    trial_ids_b: Mapped[list[int]] = mapped_column(JSON)
    bisection_id: Mapped[int | None] = mapped_column(ForeignKey("bisections.id"), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    metric_info: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON, nullable=True)  # as bisections'

    __table_args__ = (Index(None, "a", "b", "mode"), Index(None, "created_at"))

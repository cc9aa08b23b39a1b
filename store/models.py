"""SQLAlchemy 2.0 tables: API keys, sweeps, jobs (+ tags), metric series chunks, content-addressed blobs
in chunks, and what is made of them: job artifacts, uploaded data sets and ONNX models.

The schema is made only by Alembic (migrations/); tests check that autogenerate finds no
difference between these models and `alembic upgrade head`.
"""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    FetchedValue,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

ANONYMOUS = "anonymous"
JOB_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
FINISHED_STATUSES = ("succeeded", "failed", "cancelled")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    pass


class ApiKey(Base):
    """A client credential; only the SHA-256 of the secret is stored."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("key"))
    name: Mapped[str] = mapped_column(String(200))
    prefix: Mapped[str] = mapped_column(String(16))
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))


class Sweep(Base):
    """A base spec, a grid over dotted paths and the fits wanted; its jobs carry sweep_id.

    `spec` is the sweep as submitted with `base` written out canonically (every default
    filled in, the sweep's tags added): the one stored copy of what all its jobs share
    (store/sweep_specs.py). `idempotency_key` and `request_hash` (SHA-256 of the canonical
    request) let a retried POST find the sweep it made. `seq` is its creation order (GET /v1/sweeps
    pages by it), given by the database: a sequence on PostgreSQL, a trigger on SQLite
    (migrations/versions/0007_sweep_listing.py).
    """

    __tablename__ = "sweeps"
    __table_args__ = (
        Index("ix_sweeps_owner_idempotency_key", "owner", "idempotency_key", unique=True),
        Index("ix_sweeps_seq", "seq", unique=True),
        Index("ix_sweeps_owner_seq", "owner", "seq"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("swp"))
    owner: Mapped[str] = mapped_column(String(40), default=ANONYMOUS, index=True)
    name: Mapped[str | None] = mapped_column(String(200))
    spec: Mapped[dict] = mapped_column(JSON)
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    seq: Mapped[int | None] = mapped_column(Integer, server_default=FetchedValue())


class SweepTag(Base):
    """A tag of the sweep itself (its spec's top-level `tags`): what GET /v1/sweeps?tag= filters on."""

    __tablename__ = "sweep_tags"

    sweep_id: Mapped[str] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)


class Job(Base):
    """One training run. `seq` orders jobs for cursor paging; `id` is the public name.

    A job submitted on its own stores its full `spec`; a sweep's job stores only `spec_patch`,
    where its spec differs from the sweep's base (its spec is JSON null), and every reader
    sees it through ntklab.store.sweep_specs.job_spec. `spec_hash` is the SHA-256 of the canonical
    spec; for a sweep job, of its sweep's request hash and its patch (service/idempotency.py).
    """

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("owner", "idempotency_key", name="uq_jobs_owner_idempotency_key"),
        Index("ix_jobs_status_heartbeat", "status", "heartbeat_at"),
        # the fair claim (store/fairness.py) and the quota count one owner's running jobs
        # and find its latest start without reading the owner's finished history
        Index("ix_jobs_owner_status", "owner", "status"),
        Index("ix_jobs_owner_started_at", "owner", "started_at"),
        # the dry run's calibration reads each worker class's newest succeeded jobs (store/throughput.py)
        Index("ix_jobs_status_device_finished_at", "status", "device", "finished_at"),
    )

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(40), unique=True, default=lambda: new_id("job"))
    owner: Mapped[str] = mapped_column(String(40), default=ANONYMOUS)
    sweep_id: Mapped[str | None] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"), index=True)
    sweep: Mapped[Sweep | None] = relationship()
    name: Mapped[str | None] = mapped_column(String(200))
    # JSON null (not SQL NULL) for a sweep job: see migrations/versions/0005_sweep_points.py
    spec: Mapped[dict | None] = mapped_column(JSON, nullable=False)
    spec_patch: Mapped[dict | None] = mapped_column(JSON(none_as_null=True))
    spec_hash: Mapped[str] = mapped_column(String(64))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    parameters: Mapped[int] = mapped_column(BigInteger, default=0)
    # where the job stands among its owner's queued jobs (store/fairness.py): NULL for a job
    # submitted on its own (its seq then), and for a sweep's jobs their own seqs handed out
    # again largest first (store/sweeps_repo.py)
    run_order: Mapped[int | None] = mapped_column(Integer)

    status: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    device: Mapped[str | None] = mapped_column(String(64))
    worker: Mapped[str | None] = mapped_column(String(200))

    progress_step: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int] = mapped_column(Integer, default=0)
    progress_phase: Mapped[str] = mapped_column(String(32), default="queued")
    progress_eta_s: Mapped[float | None] = mapped_column(Float)

    summary: Mapped[dict | None] = mapped_column(JSON)
    warnings: Mapped[list | None] = mapped_column(JSON)  # the finished run's RunWarnings; null before it finishes
    error: Mapped[dict | None] = mapped_column(JSON)
    # computed once at submission (store/job_estimates.py); NULL before migration 0015 or when unplannable
    estimate: Mapped[dict | None] = mapped_column(JSON(none_as_null=True))

    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    enqueued_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))


class JobTag(Base):
    __tablename__ = "job_tags"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)


def _last_step(context) -> int | None:
    """The insert's default for MetricChunk.last_step: the last of its `steps` (None for an empty chunk)."""
    steps = context.get_current_parameters()["steps"]
    return steps[-1] if steps else None


class MetricChunk(Base):
    """A run of consecutive points of one series, stored compactly as two JSON arrays.

    A series is the concatenation of its chunks in `chunk` order for the job's latest
    attempt; a new attempt deletes the earlier attempt's chunks when it claims the job.
    `last_step` (the chunk's last step, filled in from `steps` on insert) and its index on
    (job_id, last_step) let a reader fetch only the chunks holding points after a given step.
    """

    __tablename__ = "metric_chunks"
    __table_args__ = (
        UniqueConstraint("job_id", "name", "chunk", name="uq_metric_chunks_job_name_chunk"),
        Index("ix_metric_chunks_job_id_last_step", "job_id", "last_step"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    chunk: Mapped[int] = mapped_column(Integer)
    steps: Mapped[list] = mapped_column(JSON)
    values: Mapped[list] = mapped_column(JSON)
    last_step: Mapped[int | None] = mapped_column(Integer, default=_last_step)


class Artifact(Base):
    """A file a job produced (kernel .npy, weights .npz, eigenvalues .json, plots): a name for one of
    the job owner's blobs, whose bytes it shares with every upload and artifact of that owner holding
    the same content (store/artifacts_repo.py). `size` is the blob's."""

    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("job_id", "name", name="uq_artifacts_job_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    media_type: Mapped[str] = mapped_column(String(100))
    size: Mapped[int] = mapped_column(BigInteger)
    blob_id: Mapped[str] = mapped_column(ForeignKey("blobs.id", ondelete="RESTRICT"), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Blob(Base):
    """Uploaded or produced bytes, stored once per owner and SHA-256, as `BlobChunk` rows of at most BLOB_CHUNK_BYTES.

    Workers on any host read a blob through the database (no shared file system). A blob is
    shared by every data set, model and job artifact of its owner that holds the same bytes,
    and deleted with the last of them.
    """

    __tablename__ = "blobs"
    __table_args__ = (UniqueConstraint("owner", "sha256", name="uq_blobs_owner_sha256"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("blob"))
    owner: Mapped[str] = mapped_column(String(40), default=ANONYMOUS)
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger)
    chunks: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class BlobChunk(Base):
    """Bytes [chunk · chunk size, …) of a blob; a blob is its chunks concatenated in chunk order."""

    __tablename__ = "blob_chunks"

    blob_id: Mapped[str] = mapped_column(ForeignKey("blobs.id", ondelete="CASCADE"), primary_key=True)
    chunk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class Dataset(Base):
    """An uploaded data set: x [points, ...] and y [points] or [points, O], each a checked .npy blob."""

    __tablename__ = "datasets"
    __table_args__ = (
        UniqueConstraint("owner", "x_blob_id", "y_blob_id", name="uq_datasets_owner_blobs"),
        Index("ix_datasets_owner_seq", "owner", "seq"),
    )

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(40), unique=True, default=lambda: new_id("ds"))
    owner: Mapped[str] = mapped_column(String(40), default=ANONYMOUS)
    name: Mapped[str | None] = mapped_column(String(200))
    x_blob_id: Mapped[str] = mapped_column(ForeignKey("blobs.id", ondelete="RESTRICT"), index=True)
    y_blob_id: Mapped[str] = mapped_column(ForeignKey("blobs.id", ondelete="RESTRICT"), index=True)
    points: Mapped[int] = mapped_column(BigInteger)
    x_shape: Mapped[list] = mapped_column(JSON)
    x_dtype: Mapped[str] = mapped_column(String(16))
    y_shape: Mapped[list] = mapped_column(JSON)
    y_dtype: Mapped[str] = mapped_column(String(16))
    # an integer x's extremes (token ids), read at upload; None for float x and before 0011
    x_min: Mapped[int | None] = mapped_column(BigInteger)
    x_max: Mapped[int | None] = mapped_column(BigInteger)
    # an integer y's extremes (class labels), read at upload; None for float y and before 0013
    y_min: Mapped[int | None] = mapped_column(BigInteger)
    y_max: Mapped[int | None] = mapped_column(BigInteger)
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class UploadedModel(Base):
    """An uploaded ONNX model: its protobuf blob and what parsing it (nothing run) found."""

    __tablename__ = "models"
    __table_args__ = (
        UniqueConstraint("owner", "blob_id", name="uq_models_owner_blob"),
        Index("ix_models_owner_seq", "owner", "seq"),
    )

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(40), unique=True, default=lambda: new_id("mdl"))
    owner: Mapped[str] = mapped_column(String(40), default=ANONYMOUS)
    name: Mapped[str | None] = mapped_column(String(200))
    blob_id: Mapped[str] = mapped_column(ForeignKey("blobs.id", ondelete="RESTRICT"), index=True)
    format: Mapped[str] = mapped_column(String(16), default="onnx")
    parameters: Mapped[int] = mapped_column(BigInteger)
    # the trainable initializers [{name, shape}] (ntklab.api_schemas.uploads.trainable_initializers); None before 0009
    trainable: Mapped[list | None] = mapped_column(JSON)
    inputs: Mapped[list] = mapped_column(JSON)
    outputs: Mapped[list] = mapped_column(JSON)
    operators: Mapped[list] = mapped_column(JSON)
    opset: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(BigInteger)
    # one example's activation elements and forward FLOPs, by shape inference at upload; None when unknown
    activation_elements: Mapped[int | None] = mapped_column(BigInteger)
    forward_flops: Mapped[int | None] = mapped_column(BigInteger)
    # what does not scale with the batch (service/onnx_upload.py): the constants folded once at conversion (bytes,
    # floats at 8; their float elements; the FLOPs of folding) and the nodes run once per forward pass; None before 0010
    constant_bytes: Mapped[int | None] = mapped_column(BigInteger)
    constant_elements: Mapped[int | None] = mapped_column(BigInteger)
    folding_flops: Mapped[int | None] = mapped_column(BigInteger)
    fixed_elements: Mapped[int | None] = mapped_column(BigInteger)
    fixed_flops: Mapped[int | None] = mapped_column(BigInteger)
    # an integer input's vocabulary: ids must lie in [0, input_vocabulary) (service/onnx_upload.input_vocabulary);
    # None for float inputs, when no embedding reads the input directly, and before 0011
    input_vocabulary: Mapped[int | None] = mapped_column(BigInteger)
    # the graph's nodes, for the time estimate's per-node term (planner/forward_profile.py); None before 0012
    nodes: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


__all__ = [
    "Base",
    "ApiKey",
    "Sweep",
    "Job",
    "JobTag",
    "MetricChunk",
    "Artifact",
    "Blob",
    "BlobChunk",
    "Dataset",
    "UploadedModel",
    "new_id",
    "utcnow",
]

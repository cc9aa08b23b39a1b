"""One settings object for the API, the worker and Alembic (env prefix NTKLAB_).

Nothing here reads the environment at import time: each entry point (the API's app
factory, the worker's `ntklab.workers.main`, `ntklab up`, Alembic's env.py) builds one
`Settings()` and passes it down. Relative paths (the SQLite file, the filesystem broker)
are relative to the folder the process starts in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, IPvAnyNetwork, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

VAR_DIR = Path("var")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="NTKLAB_", env_file=".env", extra="ignore")

    # ---- where things live. Defaults are the embedded, server-free stack.
    database_url: str = Field(default=f"sqlite:///{VAR_DIR / 'ntklab.db'}", description="SQLAlchemy URL")
    database_pool_size: int = Field(
        default=16,
        ge=1,
        le=1000,
        description="per API process: PostgreSQL connections kept open, and requests served at once",
    )
    broker_url: str = Field(default="filesystem://", description="Celery broker: filesystem:// (embedded) or redis://")
    broker_dir: Path = Field(default=VAR_DIR / "broker", description="folder of the filesystem broker")
    queue: str = Field(default="ntklab", description="Celery queue the API enqueues to")
    public_url: str | None = Field(
        default=None,
        description="base URL of Location headers and artifact URLs; unset: the address each request came to "
        "(scheme, host and port as the client wrote them), so `ntklab up --port 8100` answers on 8100",
    )

    # ---- auth
    auth: Literal["on", "off"] = Field(default="off", description="off only for the embedded default")
    bootstrap_admin_key: SecretStr | None = Field(
        default=None, description="an admin key with this secret (ntk_…) is made at API start-up if missing"
    )
    rate_limit_per_s: int = Field(default=0, ge=0, description="requests per second per key; 0 = no limit")
    auth_failures_per_minute: int = Field(
        default=30,
        ge=0,
        description="failed API key checks per client address per minute; past it, that address's keys are not looked up (429); 0 = no limit",
    )
    trusted_proxies: list[IPvAnyNetwork] = Field(
        default_factory=list,
        description='addresses or networks (JSON list: ["10.0.0.2", "172.18.0.0/16"]) of reverse proxies whose '
        "X-Forwarded-For/-Proto the API believes; empty = none: the client address is the connection's peer",
    )
    auth_cache_s: float = Field(
        default=5.0,
        ge=0,
        le=300,
        description="each API process remembers a valid key this long (a revoked key keeps working up to this long); 0 = look up every request",
    )

    # ---- resource caps (a request over one is refused up front with 413/422/429)
    max_body_bytes: int = 8 * 1024 * 1024
    max_parameters: int = 50_000_000
    max_width: int = 2_000_000
    max_probe: int = 1024
    max_kernel_entries: int = Field(default=2**24, description="(n·O)² of the probe-set tangent kernel")
    max_lanczos_entries: int = Field(
        default=2**31,
        description="Hessian Lanczos basis, iterations × parameters float64 entries (2^31 = 16 GiB)",
    )
    max_train_points: int = 100_000
    max_steps: int = 200_000
    max_inline_values: int = 1_000_000
    max_queued_jobs_per_key: int = 1000
    max_artifact_bytes: int = 256 * 1024 * 1024
    max_page_size: int = 200
    max_sweep_jobs: int = 500
    max_sweep_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=1,
        description="a sweep's stored spec: its document (base included) + every job's patch, as compact JSON; 422 over it",
    )
    max_upload_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=1,
        description="POST /v1/datasets and /v1/models: bytes streamed (and, for a data set, its unpacked arrays); 413 over it",
    )
    max_model_nodes: int = Field(default=10_000, ge=1, description="nodes and initializers in an uploaded ONNX graph")
    max_stored_bytes_per_key: int = Field(
        default=4 * 2**30,
        ge=1,
        description="bytes one key keeps in the database: its data sets' and models' blobs (each stored once per "
        "content) and its jobs' artifacts; an upload over it is refused with 413 naming `stored_bytes` (limit = this, "
        "value = the key's usage), an artifact that would pass it is skipped and named in summary.artifacts_skipped",
    )
    upload_dir: Path | None = Field(
        default=None,
        description="where uploads are received, one folder per request named after its API process; folders of "
        "processes that are gone are removed at API start-up; unset = the system's temporary folder",
    )
    max_folded_constant_bytes: int = Field(
        default=512 * 1024 * 1024,
        ge=0,
        description="POST /v1/models: bytes of the values an ONNX graph computes from constants alone (folded once when "
        "a worker converts the model, then held for the job), floats counted at 8 bytes as a float64 job holds them; "
        "422 naming the node that crosses it",
    )
    max_folding_flops: float = Field(
        default=1e11,
        ge=0,
        description="POST /v1/models: FLOPs of folding those nodes (2·K per output element for MatMul, Gemm and Conv, "
        "1 for any other node; 10¹¹ is seconds of one CPU core); 422 naming the node that crosses it",
    )
    max_concurrent_uploads_per_key: int = Field(
        default=4,
        ge=1,
        description="POST /v1/datasets and /v1/models of one key in progress at once in one API process (from its "
        "key check until its answer); the next is refused with 429 naming `concurrent_uploads`, before its body is read",
    )
    max_concurrent_model_checks: int = Field(
        default=2,
        ge=1,
        description="ONNX files of 16 MiB or more checked at once in one API process (parsing one holds its parsed copy "
        "and maps the file: about twice its size resident); the others wait up to body_deadline_s, then 503 naming `concurrent_model_checks`",
    )

    # ---- request bodies must keep arriving (service/body_timing.py): 408 naming the limit, connection closed.
    # By t seconds after the app starts reading a body, at least body_min_rate_bytes_per_s × (t − body_grace_s)
    # bytes must have arrived, and the whole body within its deadline. The defaults fit the largest body at
    # the minimum rate: max_upload_bytes (256 MiB) at 64 KiB/s is 4096 s, max_body_bytes (8 MiB) 128 s.
    body_min_rate_bytes_per_s: int = Field(
        default=64 * 1024,
        ge=0,
        description="the slowest a request body may arrive, on average, once body_grace_s has passed "
        "(64 KiB/s = 512 kbit/s); 0 = no minimum",
    )
    body_grace_s: float = Field(
        default=10.0,
        ge=0,
        le=3600,
        description="seconds a body may take before the minimum rate applies (a body shorter than "
        "body_grace_s × body_min_rate_bytes_per_s only has to arrive within this)",
    )
    body_deadline_s: float = Field(
        default=150.0,
        gt=0,
        description="seconds for the whole body of any request but an upload (JSON, up to max_body_bytes)",
    )
    upload_deadline_s: float = Field(
        default=4200.0,
        gt=0,
        description="seconds for the whole body of POST /v1/datasets and /v1/models (up to max_upload_bytes)",
    )
    max_job_memory_bytes: int = Field(
        default=8 * 2**30,
        ge=1,
        description="a job's estimated peak memory (planner/estimate.py); 422 naming the largest term over it",
    )
    max_job_flops: float = Field(
        default=1e16,
        gt=0,
        description="a job's estimated work, training and diagnostics in FLOPs (planner/estimate.py); 422 over it",
    )
    max_job_seconds: float = Field(
        default=24 * 3600,
        gt=0,
        description="a job's estimated seconds, FLOPs / estimate_flops_per_s + dispatched operations × "
        "estimate_seconds_per_op (planner/estimate.py); 422 naming the largest term over it. The default is "
        "job_time_limit_s's: a job estimated past it would be stopped there",
    )
    estimate_flops_per_s: float = Field(
        default=6.2e10,
        gt=0,
        description="the FLOP rate of the time estimate; calibrate it on the worker's device with "
        'bench/bench_time_estimate.py (docs/benchmarks.md, "Time estimate"; default: one CPU core of the reference machine)',
    )
    estimate_seconds_per_op: float = Field(
        default=4.9e-6,
        gt=0,
        description="the seconds of one dispatched framework operation, whatever its size, in the time estimate "
        "(the per-layer and per-node overhead of deep graphs); calibrated with estimate_flops_per_s",
    )

    # ---- worker behaviour
    heartbeat_interval_s: float = 2.0
    heartbeat_stale_s: float = 30.0
    reaper_interval_s: float = 5.0
    max_attempts: int = Field(default=3, ge=1, le=100, description="a job whose worker died this many times fails")
    reaper_enabled: bool = Field(default=True, description="run the stale-job reaper inside the API process")
    metrics_flush_interval_s: float = 1.0
    job_time_limit_s: int = 24 * 3600
    job_time_limit_grace_s: int = Field(
        default=60,
        ge=1,
        le=3600,
        description="after job_time_limit_s, how long a job has to stop before its worker process is killed",
    )
    job_cancel_grace_s: float = Field(
        default=2.0,
        ge=0.5,
        le=3600,
        description="after its worker sees a cancel, how long a job has to stop before it is stored cancelled "
        "and its worker process is killed",
    )
    retry_after_s: int = 2
    worker_memory_budget_bytes: int = Field(
        default=0,
        ge=0,
        description="a worker fails at once a job whose estimated peak memory exceeds this; "
        "0 = its device's memory (the GPU's, else the machine's physical memory)",
    )
    worker_memory_limit_bytes: int = Field(
        default=0,
        ge=0,
        description="CPU workers: each pool process may grow this many bytes past its size once torch is imported "
        "(RLIMIT_DATA), so an allocation past it fails the job as out_of_memory instead of waking the kernel's "
        "OOM killer; 0 = no limit",
    )
    worker_threads: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="torch intra-op threads of each worker's pool process (workers/main.py); 0 = OMP_NUM_THREADS "
        "when set, else the cores the worker owns (its CPU affinity, capped by a container's CPU quota); "
        "`ntklab up --workers N` gives each of its N workers cores / N",
    )

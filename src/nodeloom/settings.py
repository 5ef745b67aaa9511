"""Settings: every knob of the service, read from ``NODELOOM_*`` environment variables.

Nothing here is read at import time; ``Settings()`` is built by the CLI (or a test) and injected
into ``create_app(settings)``.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from nodeloom.budget import BudgetLimits
from nodeloom.errors import ConfigurationError

SECRET_FILE_NAME = "secret_key"  # noqa: S105 - a file name
MIN_SECRET_LENGTH = 32


class UploadLimitsOverride(BaseModel):
    """A plan's upload limits as written in settings (uploads/limits.py): any field left
    out keeps its plan's default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file_bytes: int | None = Field(default=None, ge=1)
    storage_bytes: int | None = Field(default=None, ge=0)
    pixels: int | None = Field(default=None, ge=1)
    seconds: float | None = Field(default=None, gt=0)


class ComfyUIServer(BaseModel):
    """One ComfyUI server of a fleet: a ``comfyui`` credential's ``servers`` or the
    operator's shared pool (``NODELOOM_COMFYUI_POOL``). See docs/providers.md, "A fleet of
    ComfyUI servers"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(max_length=2000, description="http(s) URL of the ComfyUI server.")
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="What /metrics and the node run call it (default: its host and port).",
    )
    max_in_flight: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Prompts sent to it at once (1: a single-GPU box runs one at a time; "
        "more wait in Nodeloom, where they can still go to another server).",
    )
    draining: bool = Field(
        default=False,
        description="Draining for maintenance: the prompts it holds finish, it gets no new one.",
    )
    bearer_token: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        repr=False,
        description="Shared pool only: the bearer token the server (or its proxy) requires.",
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("base_url must be an http or https URL with a host")
        if parts.username is not None or parts.password is not None:
            raise ValueError("base_url must not carry a user name or password")
        return value.rstrip("/")

    @property
    def label(self) -> str:
        """Its name, else its host and port."""
        if self.name:
            return self.name
        parts = urlsplit(self.base_url)
        return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="NODELOOM_", extra="ignore")

    data_dir: Path = Field(
        default=Path("./data"),
        description="Directory for the SQLite database, artifacts and the generated secret.",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy async URL; default sqlite+aiosqlite in the data directory.",
    )
    redis_url: str | None = Field(
        default=None, description="Redis URL for scale-out dispatch, events and rate limits."
    )
    secret_key: SecretStr | None = Field(
        default=None,
        repr=False,
        description="Server secret for JWTs, key hashes and URL signing. Generated when unset.",
    )
    base_url: str | None = Field(
        default=None,
        description="Public address of the server (scheme, host, port, no path), used in the "
        "URLs it hands out: webhook URLs, signed artifact URLs, problem `type` links, and the "
        "webhook URL Replicate calls back (unless it is localhost, a one-label name or a "
        "private address). Unset (or empty): each URL is built from the request it answers "
        "(its scheme and Host header). Set it in production, to the address clients use.",
    )
    forwarded_allow_ips: str = Field(
        default="",
        description="Comma-separated addresses or networks (CIDR) of reverse proxies whose "
        "X-Forwarded-Proto, X-Forwarded-For and X-Forwarded-Host are believed, or * for any "
        "peer. Empty: no forwarded header is believed.",
    )
    signup_enabled: bool = Field(
        default=False, description="Allow sign-up after the first (owner) account exists."
    )
    operator_emails: list[str] = Field(
        default_factory=list,
        description="E-mail addresses of the accounts that are this server's operators (the "
        "operator pages and /api/v1/operator). Empty: the first account (the owner, who set "
        "the server up) alone.",
    )
    owner_plan: str = Field(default="enterprise", description="Plan of the first account.")
    owner_credits: int = Field(default=10_000, description="Credits granted to the first account.")
    signup_plan: str = Field(default="free", description="Plan of later self-signed-up accounts.")
    signup_credits: int = Field(default=100, description="Credits granted on later sign-ups.")
    jwt_ttl_seconds: int = Field(default=86400, description="Access token lifetime.")
    sqlite_synchronous: str = Field(
        default="NORMAL",
        description="SQLite synchronous pragma in WAL mode: NORMAL (crash-safe) or FULL "
        "(also power-loss safe). See docs/adr/0003-sqlite-durability.md.",
    )
    processes: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Server processes sharing the port (SO_REUSEPORT) and the database; "
        "`nodeloom serve --processes N` sets it. Node and sandbox budgets below are for the "
        "whole server and divided among them.",
    )
    hot_paths: bool = Field(
        default=True,
        description="Answer webhook triggers, executes and run status polls beside the "
        "framework (api/hot.py); off, FastAPI answers them with the same results, slower.",
    )
    max_concurrent_accepts: int = Field(
        default=8, ge=1, description="Execute/trigger transactions being prepared at once."
    )
    max_active_runs: int = Field(
        default=64,
        ge=1,
        description="Runs driven at once by this process; more wait in a queue (they are "
        "already safe in the database).",
    )
    max_concurrent_nodes: int = Field(
        default=16, description="Nodes executing at once in this process, over all runs."
    )
    worker_concurrency: int = Field(
        default=16,
        ge=1,
        description="PostgreSQL: node jobs one worker process runs at once (nodeloom worker "
        "--concurrency sets it too); their sandbox processes are bounded as usual.",
    )
    worker_wait_concurrency: int = Field(
        default=500,
        ge=1,
        description="PostgreSQL: jobs of nodes that only wait (a provider call in flight, a "
        "child run) one worker process runs at once, besides its worker_concurrency computing "
        "ones (nodeloom worker --wait-concurrency sets it too). They hold no sandbox process "
        "and no database connection while they wait.",
    )
    worker_stalled_seconds: float = Field(
        default=8.0,
        ge=2.0,
        description="PostgreSQL: a worker whose heartbeat (sent every second) has been silent "
        "this long is taken for dead, and its nodes are given back to the queue. Too short, "
        "and a worker that a busy machine merely slowed loses its nodes (a provider call "
        "already paid for is then made again); too long, and a crashed worker's nodes wait.",
    )
    node_packages: Annotated[list[str] | None, NoDecode] = Field(
        default=None,
        description="Node packages (distribution names, comma-separated) whose node types "
        "are loaded; unset loads every installed one. See docs/node-packages.md.",
    )
    disabled_node_packages: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Node packages (distribution names, comma-separated) never loaded, even "
        "when installed and allowed.",
    )
    node_package_import_timeout: float = Field(
        default=20.0,
        gt=0,
        description="Seconds a node package's import may take (tried first in a child "
        "process) before the package is refused.",
    )
    max_concurrent_nodes_per_run: int = Field(
        default=4, description="Nodes of one run executing at once."
    )
    batch_max_items: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Most items one ForEach node of a run may have (docs/batches.md): a list "
        "known to be longer when the run is submitted is refused with 400, one found longer "
        "while it runs fails the ForEach node with batch_too_large.",
    )
    repeat_max_iterations: int = Field(
        default=20,
        ge=1,
        le=1000,
        description="Most iterations one Repeat node of a run may have (docs/repeat.md): a "
        "Repeat's max_iterations above it is held to it (the estimate too).",
    )
    batch_items_in_flight_per_account: int = Field(
        default=64,
        ge=1,
        le=100_000,
        description="Most item node runs of ForEach batches (docs/batches.md) one account may "
        "have queued or running at once, across all its running runs; more wait until some "
        "end. Other accounts are not held by it.",
    )
    run_max_work: int = Field(
        default=10_000,
        ge=1,
        description="Most node runs and child runs one run may make, the runs of its "
        "sub-workflows (and theirs) included (docs/batches.md): known to be more at execute, "
        "400; reached while it runs, the ForEach or Workflow node that would pass it fails "
        "with run_too_large.",
    )
    max_graph_nodes: int = Field(
        default=500,
        ge=1,
        description="Most nodes a workflow's graph may have. Stored runs are checked again "
        "when resumed, so lowering it fails running runs of larger graphs.",
    )
    node_timeout_seconds: float = Field(
        default=600.0, gt=0, description="Wall-time ceiling of every node, whatever its budget."
    )
    node_budgets: dict[str, BudgetLimits] = Field(
        default_factory=dict,
        description="Budgets (wall_seconds, cpu_seconds, memory_mb) by node category or type, "
        'as JSON: {"video": {"memory_mb": 3072}, "TextTemplate": {"wall_seconds": 5}}. '
        "See docs/security.md for the defaults.",
    )
    plan_budgets: dict[str, BudgetLimits] = Field(
        default_factory=dict,
        description="The most one node may spend, by plan, as JSON (same fields); free and pro "
        "are capped by default.",
    )
    node_max_attempts: int = Field(
        default=2,
        ge=1,
        description="Starts of one node before it is failed as node_crashed: a node that was "
        "running when its process died twice is not started a third time.",
    )
    sandbox_processes: int = Field(
        default=16, ge=1, description="Sandbox processes running nodes at once, at most."
    )
    sandbox_memory_mb: int = Field(
        default=6144,
        ge=256,
        description="Sum of the memory budgets of nodes running at once in one server; a node "
        "whose budget does not fit waits.",
    )
    sandbox_slots_per_account: int | None = Field(
        default=None,
        ge=1,
        description="Sandbox processes one account's nodes may hold at once; default one less "
        "than NODELOOM_SANDBOX_PROCESSES (at least 1), so another account always finds one "
        "free. Set it to NODELOOM_SANDBOX_PROCESSES for a single-account server. See "
        "docs/security.md (fair sharing).",
    )
    sandbox_memory_mb_per_account: int | None = Field(
        default=None,
        ge=64,
        description="Sum of the memory budgets one account's running nodes may book; default "
        "the same share of NODELOOM_SANDBOX_MEMORY_MB as of the sandbox processes.",
    )
    sandbox_warm: int = Field(default=1, ge=0, description="Idle sandbox processes kept ready.")
    sandbox_idle_seconds: float = Field(
        default=60.0, description="Idle sandbox processes beyond the warm ones exit after this."
    )
    shutdown_grace_seconds: float = Field(
        default=20.0, description="How long running nodes may finish after SIGTERM."
    )
    lease_seconds: float = Field(
        default=30.0, description="How long a run claim lasts without renewal."
    )
    retention_days: float = Field(
        default=30.0,
        ge=0,
        description="Finished runs (their nodes, events and artifacts) are removed this many "
        "days after they end; 0 keeps everything. The credit ledger is always kept.",
    )
    retention_check_seconds: float = Field(
        default=3600.0, gt=0, description="How often retention runs."
    )
    schedule_tick_seconds: float = Field(
        default=1.0,
        gt=0,
        description="How often each server process looks for schedules that are due "
        "(docs/schedules.md).",
    )
    schedule_min_interval_seconds: float = Field(
        default=60.0,
        ge=0,
        description="The shortest gap a schedule's cron expression may leave between two "
        "firings (a six-field expression can fire every second).",
    )
    schedules_per_workflow: dict[str, int] = Field(
        default={"pro": 10, "business": 25, "enterprise": 100},
        description="Most schedules one workflow may have, by the owner's plan (JSON, e.g. "
        '{"business": 25}); a plan not listed is not capped. Creating one more is 409.',
    )
    schedules_per_account: dict[str, int] = Field(
        default={"pro": 25, "business": 100, "enterprise": 500},
        description="Most schedules one account may have over all its workflows, by plan "
        "(JSON); a plan not listed is not capped. Creating one more is 409.",
    )
    callback_poll_seconds: float = Field(
        default=1.0, gt=0, description="How often each process looks for callbacks to send."
    )
    callback_retry_delays: list[float] = Field(
        default_factory=lambda: [5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0],
        description="Seconds between a failed callback attempt and the next one; after the "
        "last, the delivery is given up (the default spans about 27 hours).",
    )
    callback_timeout_seconds: float = Field(
        default=15.0, gt=0, description="Time limit of one callback POST."
    )
    rate_limit_api_key: int = Field(default=100, description="Requests per 60 s per API key.")
    rate_limit_jwt: int = Field(default=300, description="Requests per 60 s per JWT account.")
    rate_limit_webhook: int = Field(default=10, description="Triggers per 60 s per webhook.")
    rate_limit_window_seconds: int = Field(
        default=60, ge=1, description="Rolling window of the per-API-key and per-JWT limits."
    )
    login_max_failures: int = Field(default=10, description="Failed logins per email / 15 min.")
    signed_url_ttl_seconds: int = Field(default=3600, description="Lifetime of ?sig= URLs.")
    log_level: str = Field(default="INFO", description="Python logging level.")
    access_log: bool = Field(
        default=False,
        description="Log every request (uvicorn's access log). Credentials in URLs are "
        "redacted from every log line either way.",
    )
    web_dist_dir: Path | None = Field(
        default=None,
        description="Built web app to serve at /; default: the bundle `make install` builds "
        "into the package (nodeloom/web_dist).",
    )
    # Network-reaching nodes and the OpenAI-compatible provider (see docs/nodes.md).
    provider_base_url: str | None = Field(
        default=None, description="OpenAI-compatible API base, e.g. https://api.openai.com/v1."
    )
    provider_api_key: SecretStr | None = Field(
        default=None, repr=False, description="Provider API key (else the encrypted key file)."
    )
    provider_llm_model: str = Field(default="gpt-4o-mini", description="Chat model for LLMText.")
    provider_image_model: str = Field(default="gpt-image-1", description="Model for TextToImage.")
    provider_tts_model: str = Field(default="tts-1", description="Model for provider speech.")
    provider_timeout_seconds: float = Field(default=120.0, description="Per provider request.")
    provider_max_retries: int = Field(default=3, description="Retries on 429/5xx/timeouts.")
    provider_download_max_bytes: int = Field(
        default=200_000_000,
        ge=1,
        description="Largest file a provider node downloads from a URL its provider hands "
        "back (the artifact size limit applies too).",
    )
    comfyui_pool: list[ComfyUIServer] = Field(
        default_factory=list,
        description="The operator's shared pool of ComfyUI servers (JSON list of {base_url, "
        "name?, max_in_flight?, draining?, bearer_token?}), offered to every account through "
        'a comfyui credential {"shared_pool": true}. Drain a server by setting its '
        "draining and restarting: prompts it holds re-attach and finish, none new go to it.",
    )
    comfyui_pool_account_limit: int = Field(
        default=2,
        ge=1,
        description="Prompts one account may have in flight on the shared pool at once; "
        "free slots go to the account with the fewest in flight first.",
    )
    comfyui_check_seconds: float = Field(
        default=5.0,
        gt=0,
        description="Seconds between health checks (GET /queue) of each fleet server; a "
        "server that does not answer is taken out and checked again with back-off.",
    )
    comfyui_object_info_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Seconds a fleet server's node types and model files (GET /object_info) "
        "are kept before the background check fetches them again (a prompt that no server "
        "seems to fit fetches them at once).",
    )
    replicate_api_url: str = Field(
        default="https://api.replicate.com/v1",
        description="Replicate's HTTP API (ReplicateModel and the video/music nodes).",
    )
    replicate_webhook_poll_seconds: float = Field(
        default=30.0,
        gt=0,
        description="When Replicate calls the server back (a public NODELOOM_BASE_URL, see "
        "docs/providers.md): seconds between the status polls still made meanwhile, so a "
        "lost webhook only delays a node.",
    )
    fal_queue_url: str = Field(
        default="https://queue.fal.run", description="fal's queue API (FalModel and families)."
    )
    fal_api_url: str = Field(
        default="https://api.fal.ai/v1",
        description="fal's platform API: credential tests (model pricing) and model schemas.",
    )
    fal_rest_url: str = Field(
        default="https://rest.fal.ai",
        description="fal's REST API: its storage, where an input too large to send inline is "
        "uploaded (POST /storage/upload/initiate, then a PUT to the URL it answers).",
    )
    provider_inline_max_bytes: int = Field(
        default=1_000_000,
        ge=0,
        description="Bytes of media a Replicate or fal call sends inline as data: URIs, all "
        "its bound files together; the files past it are uploaded to the provider first "
        "(Replicate's POST /v1/files, fal's storage) and sent as URLs. 0 uploads every file.",
    )
    provider_credits_per_usd: float = Field(
        default=100.0,
        gt=0,
        description="Credits per US dollar of a provider's reported cost, for nodes priced by "
        "pass-through (see docs/providers.md).",
    )
    provider_cost_markup: float = Field(
        default=0.0,
        ge=0,
        description="Markup on a provider's reported cost (0.2 adds 20%), for nodes priced by "
        "pass-through.",
    )
    http_allowlist: list[str] = Field(
        default_factory=list,
        description="Hosts or CIDRs that network nodes may reach although private/loopback.",
    )
    http_max_response_bytes: int = Field(default=10_000_000, description="HttpRequest cap.")
    http_timeout_seconds: float = Field(default=30.0, description="HttpRequest time limit.")
    max_image_pixels: int = Field(default=40_000_000, description="Largest image, in pixels.")
    max_media_seconds: float = Field(default=600.0, description="Longest audio or video.")
    max_artifact_bytes: int = Field(default=512_000_000, description="Largest artifact.")
    upload_limits: dict[str, UploadLimitsOverride] = Field(
        default_factory=dict,
        description="Upload limits by plan, as JSON (fields file_bytes, storage_bytes, pixels, "
        'seconds): {"free": {"storage_bytes": 2147483648}}. Fields left out keep their '
        "defaults (docs/media-inputs.md); max_image_pixels and max_media_seconds cap them all.",
    )
    tus_expiry_seconds: int = Field(
        default=86400,
        ge=1,
        description="A resumable upload (tus) not finished this long after its creation is "
        "removed, and the quota it held given back.",
    )
    artifact_store: Literal["local", "s3"] = Field(
        default="local",
        description="Where artifact bytes live: files under the data directory, or an "
        "S3-compatible object store shared by every host (the NODELOOM_S3_* settings).",
    )
    s3_bucket: str | None = Field(default=None, description="Bucket for artifacts.")
    s3_endpoint_url: str | None = Field(
        default=None, description="Endpoint of a non-AWS store, e.g. http://minio:9000."
    )
    s3_region: str = Field(default="us-east-1", description="Region of the bucket.")
    s3_access_key_id: str | None = Field(default=None, description="Access key id.")
    s3_secret_access_key: SecretStr | None = Field(
        default=None, repr=False, description="Secret access key."
    )
    s3_prefix: str = Field(default="", description="Key prefix inside the bucket.")
    artifact_cache_mb: int = Field(
        default=2048,
        ge=16,
        description="S3: local copies of artifacts kept for nodes to read (least recently "
        "used go first).",
    )

    @field_validator("node_packages", "disabled_node_packages", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip().rstrip("/")
        parts = urlsplit(value)
        if parts.scheme not in {"http", "https"} or not parts.netloc or parts.query:
            raise ValueError("must be an http(s) address such as https://nodeloom.example.com")
        return value

    @field_validator("sqlite_synchronous")
    @classmethod
    def _check_sync(cls, value: str) -> str:
        value = value.upper()
        if value not in {"NORMAL", "FULL"}:
            raise ValueError("must be NORMAL or FULL")
        return value

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{(self.data_dir / 'nodeloom.db').resolve()}"

    @property
    def is_sqlite(self) -> bool:
        return self.effective_database_url.startswith("sqlite")

    def prepare(self) -> Settings:
        """Create the data directory and settle the server secret; return self.

        Embedded default: the secret is generated once and kept in the data directory (0600).
        With a non-default database (a production deployment) a missing or weak secret is
        refused, because replicas must share one secret and a generated one would differ.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)
        if self.secret_key is not None:
            if len(self.secret_key.get_secret_value()) < MIN_SECRET_LENGTH:
                raise ConfigurationError(
                    f"NODELOOM_SECRET_KEY must be at least {MIN_SECRET_LENGTH} characters"
                )
            return self
        if self.database_url and not self.is_sqlite:
            raise ConfigurationError(
                "NODELOOM_SECRET_KEY is required when NODELOOM_DATABASE_URL names a server "
                "database (every replica must share it)"
            )
        path = self.data_dir / SECRET_FILE_NAME
        if not path.exists():
            value = secrets.token_urlsafe(48)
            fd = path.open("x", encoding="utf-8")
            with fd:
                path.chmod(0o600)
                fd.write(value)
        self.secret_key = SecretStr(path.read_text(encoding="utf-8").strip())
        return self

    @property
    def secret(self) -> bytes:
        if self.secret_key is None:
            raise ConfigurationError("settings.prepare() was not called")
        return self.secret_key.get_secret_value().encode()

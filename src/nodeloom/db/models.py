"""Tables. Both SQLite and PostgreSQL use exactly these; migrations mirror them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """Stores naive UTC, returns aware UTC, on both databases (SQLite keeps no zone)."""

    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC)

    # On SQLite the value is text in SQLAlchemy's format (``2026-11-24 21:42:31.290928``);
    # these do what the two steps above do with the DATETIME type's own processors, with
    # datetime's C methods instead of a format string and a regular expression (every run
    # writes a few dozen of them).
    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)
        return _sqlite_bind

    def result_processor(self, dialect: Dialect, coltype: Any) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)
        return _sqlite_result


def _sqlite_bind(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError("naive datetime given to a UTC column")
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")


def _sqlite_result(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


def _partial_index(name: str, *columns: str, where: str, unique: bool = False) -> sa.Index:
    """An index of the rows that match ``where`` only, the same predicate on both databases
    (SQLAlchemy takes it once per dialect)."""
    return sa.Index(
        name,
        *columns,
        unique=unique,
        sqlite_where=sa.text(where),
        postgresql_where=sa.text(where),
    )


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: sa.JSON}


class Account(Base):
    __tablename__ = "accounts"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    email: Mapped[str] = mapped_column(sa.String(320), unique=True)
    password_hash: Mapped[str] = mapped_column(sa.String(255))
    plan: Mapped[str] = mapped_column(sa.String(16))
    created_at: Mapped[datetime]
    # Every JWT carries the value it was issued with; bumping it (password change, account
    # disabled) refuses them all at once.
    token_version: Mapped[int] = mapped_column(default=0, server_default="0")
    disabled_at: Mapped[datetime | None]
    # The Standard Webhooks signing secret of run callbacks (``whsec_...``), encrypted with
    # the server secret; NULL until the account creates one (engine/callbacks.py).
    callback_secret_encrypted: Mapped[str | None] = mapped_column(sa.Text)
    callback_secret_created_at: Mapped[datetime | None]


class AccountBalance(Base):
    """An account's credits, in a row of their own (ADR 0023). Every run accepted or ended
    updates the balance, while the foreign keys of runs, artifacts and ledger rows lock the
    account row (FOR KEY SHARE) and a run's insert reads it: on PostgreSQL those checks on a
    row under constant update cost several times the rest of a busy acceptance. This row is
    touched by the balance's own statements only."""

    __tablename__ = "account_balances"

    account_id: Mapped[str] = mapped_column(
        sa.ForeignKey("accounts.id", ondelete="CASCADE"), primary_key=True
    )
    credits_balance: Mapped[int] = mapped_column(sa.BigInteger)

    __table_args__ = (
        sa.CheckConstraint("credits_balance >= 0", name="ck_account_balances_balance"),
    )


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    account_id: Mapped[str] = mapped_column(sa.ForeignKey("accounts.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(200))
    prefix: Mapped[str] = mapped_column(sa.String(16))
    key_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[datetime]
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]

    __table_args__ = (sa.Index("ix_api_keys_account", "account_id", "created_at"),)


class Credential(Base):
    """A provider credential of one account: the non-secret fields (``base_url``...) in
    ``fields``, the secret ones only as ``secret_encrypted`` (a JSON object encrypted with the
    server secret), and ``hint`` (the masked secret shown in answers)."""

    __tablename__ = "credentials"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    account_id: Mapped[str] = mapped_column(sa.ForeignKey("accounts.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(200))
    kind: Mapped[str] = mapped_column(sa.String(32))
    fields: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    secret_encrypted: Mapped[str] = mapped_column(sa.Text)
    hint: Mapped[str] = mapped_column(sa.String(32))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    last_used_at: Mapped[datetime | None]

    __table_args__ = (sa.Index("ix_credentials_account", "account_id", "created_at"),)


class Workflow(Base):
    __tablename__ = "workflows"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    account_id: Mapped[str] = mapped_column(sa.ForeignKey("accounts.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(500))
    node_count: Mapped[int]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    deleted_at: Mapped[datetime | None]
    # Large columns last: SQLite reads a row's columns in order, so anything stored after a
    # big JSON value costs a walk through its overflow pages.
    graph_json: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    # The number of the current version (``workflow_versions``): every save adds one. It is
    # the workflow's ETag, and ``If-Match`` on an update compares against it.
    version: Mapped[int] = mapped_column(server_default="1")

    __table_args__ = (sa.Index("ix_workflows_account_created", "account_id", "created_at", "id"),)


class WorkflowVersion(Base):
    """One save of a workflow, never changed afterwards: its name and graph as saved, who
    saved it, with which credential, and the message they gave."""

    __tablename__ = "workflow_versions"

    workflow_id: Mapped[str] = mapped_column(
        sa.ForeignKey("workflows.id", ondelete="CASCADE"), primary_key=True
    )
    number: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(500))
    node_count: Mapped[int]
    created_at: Mapped[datetime]
    # Who saved it (NULL for the version 1 that migration 0010 made of an existing workflow).
    author_account_id: Mapped[str | None] = mapped_column(sa.String(36))
    author_via: Mapped[str | None] = mapped_column(sa.String(16))  # "api_key" or "jwt"
    author_api_key_id: Mapped[str | None] = mapped_column(sa.String(36))
    message: Mapped[str | None] = mapped_column(sa.String(1000))
    # The version whose content a restore saved again.
    restored_from: Mapped[int | None]
    graph_json: Mapped[dict[str, Any]] = mapped_column(sa.JSON)


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    account_id: Mapped[str] = mapped_column(sa.ForeignKey("accounts.id", ondelete="CASCADE"))
    workflow_id: Mapped[str] = mapped_column(sa.ForeignKey("workflows.id", ondelete="CASCADE"))
    webhook_id: Mapped[str | None] = mapped_column(sa.String(36))
    status: Mapped[str] = mapped_column(sa.String(16))
    # What started the run: "api", "webhook" or "editor" (the web app), for the run lists.
    trigger: Mapped[str] = mapped_column(sa.String(16), server_default="api")
    use_cache: Mapped[bool]
    estimated_credits: Mapped[int] = mapped_column(sa.BigInteger)
    credits_used: Mapped[int] = mapped_column(sa.BigInteger)
    error: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    created_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    # The server process driving the run in the embedded mode (engine/dispatch/local.py);
    # NULL when queue workers drive it node by node (engine/dispatch/queue.py).
    driver: Mapped[str | None] = mapped_column(sa.String(64))
    # The failed or cancelled run this one retries (engine/retry.py); NULL otherwise.
    retried_from: Mapped[str | None] = mapped_column(sa.String(36))
    # A sub-workflow's run (engine/subworkflows.py): the run and the Workflow node that
    # started it; NULL for any other run. One child per (parent run, node): unique.
    parent_run_id: Mapped[str | None] = mapped_column(sa.String(36))
    parent_node_id: Mapped[str | None] = mapped_column(sa.String(200))
    # Large columns last (see Workflow). The graph as it was when the run started: later
    # edits never change a run.
    input: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    graph_json: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    # The workflow version the run was started from (NULL for runs older than versions).
    workflow_version: Mapped[int | None]

    __table_args__ = (
        sa.Index("ix_runs_workflow_created", "workflow_id", "created_at", "id"),
        sa.Index("ix_runs_account_created", "account_id", "created_at", "id"),
        sa.Index("ix_runs_retried_from", "retried_from"),
        sa.Index("ux_runs_parent", "parent_run_id", "parent_node_id", unique=True),
        _partial_index("ix_runs_running", "driver", where="status = 'running'"),
    )


class NodeRun(Base):
    __tablename__ = "node_runs"

    run_id: Mapped[str] = mapped_column(
        sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    node_id: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    position: Mapped[int]
    # The item of a ForEach this row runs (engine/batches.py): node_id is then the instance
    # id "<node id>#<item>"; NULL for a node that runs once.
    item_index: Mapped[int | None]
    type: Mapped[str] = mapped_column(sa.String(100))
    status: Mapped[str] = mapped_column(sa.String(16))
    artifact_id: Mapped[str | None] = mapped_column(sa.String(36))
    credits_used: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    cached: Mapped[bool] = mapped_column(default=False)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    error: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    attempts: Mapped[int] = mapped_column(default=0)
    # Who runs the node: a server process token or "job:<id>" of a queue job.
    claimed_by: Mapped[str | None] = mapped_column(sa.String(64))
    queued_at: Mapped[datetime | None]
    # What a provider node submitted (the provider's job id), committed before it waits: a
    # node run again after a crash attaches to it rather than paying twice (nodes/adapters).
    provider_job: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    # The run a Workflow node started (engine/subworkflows.py); NULL for other nodes.
    child_run_id: Mapped[str | None] = mapped_column(sa.String(36))
    # The outputs a node with branches took (engine/branches.py); NULL: all of them.
    ports: Mapped[list[str] | None] = mapped_column(sa.JSON)

    __table_args__ = (
        # Retention asks which runs still show an artifact (cache hits share one).
        sa.Index("ix_node_runs_artifact", "artifact_id"),
        # The reconciler looks for nodes queued a while without a job.
        _partial_index("ix_node_runs_queued", "queued_at", where="status = 'queued'"),
    )


class Approval(Base):
    """A person's decision an ``Approval`` node waits for (engine/approvals.py). Written,
    committed, by the node when it starts waiting (one per run and node: a node run again
    after a restart finds its own); decided by one conditional UPDATE from ``pending`` —
    by a person through the API or a signed link, or by the node itself at ``expires_at``
    with ``timeout_outcome``."""

    __tablename__ = "approvals"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    account_id: Mapped[str] = mapped_column(sa.ForeignKey("accounts.id", ondelete="CASCADE"))
    workflow_id: Mapped[str] = mapped_column(sa.String(36))
    run_id: Mapped[str] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"))
    node_id: Mapped[str] = mapped_column(sa.String(200))
    # pending, approved or rejected.
    status: Mapped[str] = mapped_column(sa.String(16))
    kind: Mapped[str] = mapped_column(sa.String(16))  # the node's: text, json, image...
    prompt: Mapped[str] = mapped_column(sa.Text)
    allow_edit: Mapped[bool]
    timeout_outcome: Mapped[str] = mapped_column(sa.String(16))
    # The input the reviewer judges (an artifact of the run), NULL when it had none.
    input_artifact_id: Mapped[str | None] = mapped_column(sa.String(36))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    decided_at: Mapped[datetime | None]
    # "api", "link" or "timeout".
    decided_by: Mapped[str | None] = mapped_column(sa.String(16))
    comment: Mapped[str | None] = mapped_column(sa.Text)
    # The reviewer's edited text (only where the node allows it), NULL: the input unchanged.
    text: Mapped[str | None] = mapped_column(sa.Text)

    __table_args__ = (
        sa.Index("ux_approvals_node", "run_id", "node_id", unique=True),
        _partial_index(
            "ix_approvals_pending", "account_id", "created_at", where="status = 'pending'"
        ),
    )


class Artifact(Base):
    __tablename__ = "artifacts"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    account_id: Mapped[str] = mapped_column(sa.ForeignKey("accounts.id", ondelete="CASCADE"))
    run_id: Mapped[str] = mapped_column(sa.String(36))
    workflow_id: Mapped[str] = mapped_column(sa.String(36))
    node_id: Mapped[str] = mapped_column(sa.String(200))
    content_type: Mapped[str] = mapped_column(sa.String(64))
    size_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    sha256: Mapped[str] = mapped_column(sa.String(64))
    width: Mapped[int | None]
    height: Mapped[int | None]
    duration_ms: Mapped[int | None] = mapped_column(sa.BigInteger)
    created_at: Mapped[datetime]
    # The bytes of a small text artifact (engine/executor.py INLINE_TEXT_BYTES); NULL when
    # they are in the artifact store. Near the end, so rows read without it skip its pages.
    data: Mapped[bytes | None] = mapped_column(sa.LargeBinary)
    # The node cache key (type, version, params, input hashes) the artifact answers, for a
    # later node of the same account with the same key; NULL for a node without one.
    cache_key: Mapped[str | None] = mapped_column(sa.String(64))

    __table_args__ = (
        # The output cache: an artifact of an account for a key (highest id), one index probe.
        _partial_index(
            "ix_artifacts_cache", "account_id", "cache_key", "id", where="cache_key IS NOT NULL"
        ),
    )


class Asset(Base):
    """A file an account brought (an upload), kept as one of our four types: the stored blob
    (``sha256``, after any conversion) and what was sent (``source_sha256``,
    ``source_format``). One asset per account and stored content: uploading the same bytes
    again answers the asset that holds them (``ux_assets_content``)."""

    __tablename__ = "assets"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    account_id: Mapped[str] = mapped_column(sa.ForeignKey("accounts.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(255))
    kind: Mapped[str] = mapped_column(sa.String(16))
    content_type: Mapped[str] = mapped_column(sa.String(64))
    size_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    sha256: Mapped[str] = mapped_column(sa.String(64))
    source_sha256: Mapped[str] = mapped_column(sa.String(64))
    source_format: Mapped[str] = mapped_column(sa.String(32))
    width: Mapped[int | None]
    height: Mapped[int | None]
    duration_ms: Mapped[int | None] = mapped_column(sa.BigInteger)
    video_codec: Mapped[str | None] = mapped_column(sa.String(32))
    audio_codec: Mapped[str | None] = mapped_column(sa.String(32))
    thumbnail_sha256: Mapped[str | None] = mapped_column(sa.String(64))
    thumbnail_bytes: Mapped[int | None]
    tags: Mapped[list[str]] = mapped_column(sa.JSON)
    created_at: Mapped[datetime]

    __table_args__ = (
        sa.Index("ix_assets_account", "account_id", "created_at"),
        sa.Index("ux_assets_content", "account_id", "sha256", unique=True),
        sa.Index("ix_assets_source", "account_id", "source_sha256"),
    )


class AccountStorage(Base):
    """Bytes of assets an account holds, against its plan's quota. Changed only by one
    conditional statement per upload or delete (store/assets.py), so two uploads at once
    can never both take the last of the quota, on either database."""

    __tablename__ = "account_storage"

    account_id: Mapped[str] = mapped_column(
        sa.ForeignKey("accounts.id", ondelete="CASCADE"), primary_key=True
    )
    bytes_used: Mapped[int] = mapped_column(sa.BigInteger)

    __table_args__ = (sa.CheckConstraint("bytes_used >= 0", name="ck_account_storage_bytes"),)


class CreditEntry(Base):
    """Append-only credit ledger. balance = grants - holds + releases; charges move nothing
    (they were held) but record what a node cost. A unique (run, node, kind) makes a second
    charge for the same node fail instead of counting twice."""

    __tablename__ = "credit_ledger"

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    account_id: Mapped[str] = mapped_column(sa.ForeignKey("accounts.id", ondelete="CASCADE"))
    run_id: Mapped[str] = mapped_column(sa.String(36), default="")
    node_id: Mapped[str] = mapped_column(sa.String(200), default="")
    kind: Mapped[str] = mapped_column(sa.String(16))
    amount: Mapped[int] = mapped_column(sa.BigInteger)
    note: Mapped[str | None] = mapped_column(sa.String(200))
    created_at: Mapped[datetime]

    __table_args__ = (
        sa.Index("ix_ledger_account", "account_id", "id"),
        _partial_index(
            "uq_ledger_run_node_kind",
            "run_id",
            "node_id",
            "kind",
            where="run_id != ''",
            unique=True,
        ),
    )


class IdempotencyKey(Base):
    __tablename__ = "idempotency_keys"

    account_id: Mapped[str] = mapped_column(
        sa.ForeignKey("accounts.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    run_id: Mapped[str] = mapped_column(sa.String(36))
    response: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    created_at: Mapped[datetime]
    # What the first request asked for (workflow, input, cache): a reuse of the key for
    # anything else is refused, never answered with the first request's run.
    request_hash: Mapped[str | None] = mapped_column(sa.String(64))


class Webhook(Base):
    __tablename__ = "webhooks"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    account_id: Mapped[str] = mapped_column(sa.ForeignKey("accounts.id", ondelete="CASCADE"))
    workflow_id: Mapped[str] = mapped_column(sa.ForeignKey("workflows.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(200))
    active: Mapped[bool]
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    # The token itself, encrypted with the server secret, so the URL can be shown again.
    token_encrypted: Mapped[str] = mapped_column(sa.Text)
    secret_encrypted: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime]
    deleted_at: Mapped[datetime | None]
    # Where the runs it starts report when they end (engine/callbacks.py), or NULL.
    callback_url: Mapped[str | None] = mapped_column(sa.String(2048))

    __table_args__ = (sa.Index("ix_webhooks_workflow", "workflow_id", "created_at"),)


class Schedule(Base):
    """A cron trigger of a workflow (engine/schedules.py). ``next_run_at`` is the claim: the
    process whose conditional UPDATE moves it on from the value it read fires that time."""

    __tablename__ = "schedules"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    account_id: Mapped[str] = mapped_column(sa.ForeignKey("accounts.id", ondelete="CASCADE"))
    workflow_id: Mapped[str] = mapped_column(sa.ForeignKey("workflows.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(200))
    cron: Mapped[str] = mapped_column(sa.String(200))
    timezone: Mapped[str] = mapped_column(sa.String(64))
    active: Mapped[bool]
    callback_url: Mapped[str | None] = mapped_column(sa.String(2048))
    next_run_at: Mapped[datetime | None]
    last_fired_at: Mapped[datetime | None]
    last_run_id: Mapped[str | None] = mapped_column(sa.String(36))
    # Why the last firing started no run ({code, message}), NULL when it did.
    last_error: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    input: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)

    __table_args__ = (
        sa.Index("ix_schedules_workflow", "workflow_id", "created_at", "id"),
        _partial_index("ix_schedules_due", "next_run_at", where="active"),
    )


class CallbackDelivery(Base):
    """The callback of one run: written with the run when it is accepted, sent by whichever
    process claims it once the run has ended, retried with back-off (engine/callbacks.py)."""

    __tablename__ = "callback_deliveries"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    run_id: Mapped[str] = mapped_column(sa.String(36), unique=True)
    account_id: Mapped[str] = mapped_column(sa.ForeignKey("accounts.id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(sa.String(2048))
    # pending (waiting for the run to end, or for its next attempt), delivered, failed.
    state: Mapped[str] = mapped_column(sa.String(16))
    attempts: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime]
    claimed_until: Mapped[datetime | None]
    created_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]

    __table_args__ = (
        _partial_index("ix_callback_deliveries_due", "next_attempt_at", where="state = 'pending'"),
    )


class CallbackAttempt(Base):
    """One POST of a callback: when, what came back (the start of the body) or what failed."""

    __tablename__ = "callback_attempts"

    delivery_id: Mapped[str] = mapped_column(
        sa.ForeignKey("callback_deliveries.id", ondelete="CASCADE"), primary_key=True
    )
    attempt: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime]
    duration_ms: Mapped[int]
    status_code: Mapped[int | None]
    response: Mapped[str | None] = mapped_column(sa.Text)
    error: Mapped[str | None] = mapped_column(sa.Text)


class RunEvent(Base):
    __tablename__ = "run_events"

    run_id: Mapped[str] = mapped_column(
        sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(primary_key=True)
    type: Mapped[str] = mapped_column(sa.String(32))
    node_id: Mapped[str | None] = mapped_column(sa.String(200))
    data: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    ts: Mapped[datetime]


class CredentialRevocation(Base):
    """Append-only feed of revoked credentials (``key:<id>``, ``jwt:<account>``,
    ``account:<account>``), written in the transaction that revokes. Every server process
    follows it (auth/revocation.py) to close open streams, whichever process — or command
    line — did the revoking. Rows older than a day are pruned."""

    __tablename__ = "credential_revocations"

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    scope: Mapped[str] = mapped_column(sa.String(80))
    created_at: Mapped[datetime]


class App(Base):
    """A workflow published as a page other people use (engine/apps.py): the saved version
    it runs, the form it shows, who may open it and what it may spend of its owner's
    credits. ``slug`` is the unguessable public name; ``password_hash`` an argon2id hash."""

    __tablename__ = "apps"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    account_id: Mapped[str] = mapped_column(sa.ForeignKey("accounts.id", ondelete="CASCADE"))
    workflow_id: Mapped[str] = mapped_column(sa.ForeignKey("workflows.id", ondelete="CASCADE"))
    workflow_version: Mapped[int]
    slug: Mapped[str] = mapped_column(sa.String(64), unique=True)
    title: Mapped[str] = mapped_column(sa.String(200))
    description: Mapped[str] = mapped_column(sa.Text)
    cover_asset_id: Mapped[str | None] = mapped_column(sa.String(36))
    # private, link or public.
    access: Mapped[str] = mapped_column(sa.String(16))
    password_hash: Mapped[str | None] = mapped_column(sa.String(255))
    published: Mapped[bool]
    budget_daily: Mapped[int | None]
    budget_total: Mapped[int | None]
    max_concurrent: Mapped[int | None]
    rate_per_visitor: Mapped[int]  # accepted runs per visitor session per hour
    rate_per_ip: Mapped[int]  # accepted runs per client address per hour
    # Leading zero bits a visitor's proof of work must reach; None: no proof asked.
    challenge_bits: Mapped[int | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    # The form: [{key, kind, label, help, default, max_length, required}], and the
    # outputs shown: [{node_id, label}].
    inputs: Mapped[list[dict[str, Any]]] = mapped_column(sa.JSON)
    outputs: Mapped[list[dict[str, Any]]] = mapped_column(sa.JSON)
    frame_ancestors: Mapped[list[str]] = mapped_column(sa.JSON)

    __table_args__ = (sa.Index("ix_apps_account_created", "account_id", "created_at", "id"),)


class AppRun(Base):
    """A run started through an app, written by the run's own acceptance transaction: whose
    visitor token reads it (an HMAC of the token, never the token) and the visitor session
    that started it."""

    __tablename__ = "app_runs"

    run_id: Mapped[str] = mapped_column(
        sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    app_id: Mapped[str] = mapped_column(sa.ForeignKey("apps.id", ondelete="CASCADE"))
    token_hash: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[datetime]

    __table_args__ = (sa.Index("ix_app_runs_app_created", "app_id", "created_at"),)


class AppChallenge(Base):
    """A proof-of-work challenge already answered (engine/app_challenge.py), kept until it
    expires so that one solution starts one run."""

    __tablename__ = "app_challenges"

    nonce: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    expires_at: Mapped[datetime]

    __table_args__ = (sa.Index("ix_app_challenges_expires", "expires_at"),)


class TusUpload(Base):
    """A resumable upload (tus 1.0, uploads/tus.py) being received: every replica reads and
    moves it here, so any of them takes any part. ``offset_bytes`` counts bytes durably
    stored (the part file or the multipart upload plus ``tail_key``); ``held_bytes`` of the
    declared length are held against the storage quota until the asset takes its own.
    ``lease``/``busy_until``: the request writing it now (one writer at a time)."""

    __tablename__ = "tus_uploads"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    account_id: Mapped[str] = mapped_column(sa.ForeignKey("accounts.id", ondelete="CASCADE"))
    length: Mapped[int] = mapped_column(sa.BigInteger)
    offset_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    held_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    name: Mapped[str | None] = mapped_column(sa.String(255))
    upload_metadata: Mapped[str | None] = mapped_column(sa.Text)
    storage: Mapped[str] = mapped_column(sa.String(8))  # "file" or "s3"
    multipart_id: Mapped[str | None] = mapped_column(sa.String(1024))
    parts: Mapped[list[str]] = mapped_column(sa.JSON)  # ETags of the S3 parts, in order
    # S3: bytes received after the last whole part (less than a part), kept with the
    # offset they complete so the two commit together.
    tail: Mapped[bytes | None] = mapped_column(sa.LargeBinary)
    lease: Mapped[str | None] = mapped_column(sa.String(32))
    busy_until: Mapped[datetime | None]
    asset_id: Mapped[str | None] = mapped_column(sa.String(36))
    problem: Mapped[dict[str, object] | None] = mapped_column(sa.JSON)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]

    __table_args__ = (
        sa.Index("ix_tus_uploads_account", "account_id"),
        sa.Index("ix_tus_uploads_expires", "expires_at"),
    )


class ComfyUIDrain(Base):
    """A ComfyUI server drained by a person (the Drain button): the prompts it holds finish,
    it gets no new one. Every process that routes prompts reads this table again every
    ``comfyui_check_seconds`` (nodes/adapters/comfyui_drains.py), so a drain holds across
    API replicas, workers and restarts. ``server_id`` is ``comfyui_fleet.server_id`` of
    ``fleet`` (``pool``, or ``credential:<id>``) and ``base_url``; a credential's rows go
    with it. Draining set in configuration (``draining: true``) is not here."""

    __tablename__ = "comfyui_drains"

    server_id: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    fleet: Mapped[str] = mapped_column(sa.String(80))
    base_url: Mapped[str] = mapped_column(sa.String(2000))
    credential_id: Mapped[str | None] = mapped_column(
        sa.ForeignKey("credentials.id", ondelete="CASCADE")
    )
    drained_by: Mapped[str | None] = mapped_column(
        sa.ForeignKey("accounts.id", ondelete="SET NULL")
    )
    created_at: Mapped[datetime]

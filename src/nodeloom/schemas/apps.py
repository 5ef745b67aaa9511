"""App bodies: create, update, the app as its owner sees it, the form a visitor sees, and a
visitor's run."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from nodeloom.timestamps import Timestamp

Access = Literal["private", "link", "public"]
InputKind = Literal["text", "image", "audio", "video"]
MAX_TEXT = 100_000
MAX_INT = 2_000_000_000  # within a 32-bit INTEGER column on both databases
CHALLENGE_MAX_BITS = 24  # about 16 million hashes: tens of seconds in a phone's browser


class AppInput(BaseModel):
    """One field of the form: the run-input key an input node of the pinned version reads."""

    model_config = ConfigDict(extra="ignore")

    key: str = Field(min_length=1, max_length=200, description="The input node's key.")
    label: str = Field(default="", max_length=200, description="Shown above the field.")
    help: str = Field(default="", max_length=2000, description="Shown under the field.")
    default: str | None = Field(
        default=None, max_length=MAX_TEXT, description="Prefilled text (text inputs only)."
    )
    max_length: int = Field(
        default=2000, ge=1, le=MAX_TEXT, description="Longest text a visitor may send."
    )
    required: bool = Field(default=True, description="The form cannot be sent without it.")


class AppOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    node_id: str = Field(min_length=1, max_length=200, description="A node of the version.")
    label: str = Field(default="", max_length=200)


class _Limits(BaseModel):
    budget_daily: int | None = Field(
        default=None, ge=0, le=MAX_INT, description="Credits the app's runs may take per UTC day."
    )
    budget_total: int | None = Field(
        default=None, ge=0, le=MAX_INT, description="Credits the app's runs may take in all."
    )
    max_concurrent: int | None = Field(
        default=None, ge=1, le=10_000, description="Runs of the app going at once."
    )


class _Challenge(BaseModel):
    challenge_bits: int | None = Field(
        default=None,
        ge=1,
        le=CHALLENGE_MAX_BITS,
        description="A proof of work each run must carry: leading zero bits of SHA-256 "
        "(each bit doubles the visitor's work; 16 is about 65,000 hashes). null: none.",
    )


class AppCreate(_Limits, _Challenge):
    model_config = ConfigDict(extra="ignore")

    workflow_id: str = Field(min_length=1, max_length=36)
    workflow_version: int | None = Field(
        default=None,
        ge=1,
        le=MAX_INT,
        description="The saved version it runs; default: the current one.",
    )
    title: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=10_000)
    cover_asset_id: str | None = Field(default=None, max_length=36)
    inputs: list[AppInput] | None = Field(
        default=None, max_length=50, description="Default: every input node of the version."
    )
    outputs: list[AppOutput] = Field(min_length=1, max_length=50)
    access: Access = "link"
    password: str | None = Field(default=None, min_length=4, max_length=128)
    rate_per_visitor: int = Field(default=20, ge=1, le=100_000, description="Runs per hour.")
    rate_per_ip: int = Field(default=60, ge=1, le=100_000, description="Runs per hour.")
    frame_ancestors: list[str] = Field(default_factory=list, max_length=20)
    published: bool = True


class AppUpdate(_Limits, _Challenge):
    """Only the fields sent change; ``"password": null`` removes the password."""

    model_config = ConfigDict(extra="ignore")

    workflow_version: int | None = Field(default=None, ge=1, le=MAX_INT)
    title: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=10_000)
    cover_asset_id: str | None = Field(default=None, max_length=36)
    inputs: list[AppInput] | None = Field(default=None, max_length=50)
    outputs: list[AppOutput] | None = Field(default=None, min_length=1, max_length=50)
    access: Access | None = None
    password: str | None = Field(default=None, min_length=4, max_length=128)
    rate_per_visitor: int | None = Field(default=None, ge=1, le=100_000)
    rate_per_ip: int | None = Field(default=None, ge=1, le=100_000)
    frame_ancestors: list[str] | None = Field(default=None, max_length=20)
    published: bool | None = None


class FormField(AppInput):
    kind: InputKind


class AppOut(BaseModel):
    id: str
    slug: str
    url: str = Field(description="The app's page.")
    workflow_id: str
    workflow_version: int
    title: str
    description: str
    cover_asset_id: str | None
    inputs: list[FormField]
    outputs: list[AppOutput]
    access: Access
    has_password: bool
    published: bool
    budget_daily: int | None
    budget_total: int | None
    max_concurrent: int | None
    rate_per_visitor: int
    rate_per_ip: int
    challenge_bits: int | None
    frame_ancestors: list[str]
    spent_today: int
    spent_total: int
    created_at: Timestamp
    updated_at: Timestamp


class Challenge(BaseModel):
    """A proof of work to solve before a run: find a string ``solution`` such that
    SHA-256 of ``"<token>:<solution>"`` starts with ``bits`` zero bits."""

    algorithm: Literal["sha256-leading-zero-bits"]
    token: str = Field(description="Send it back as X-App-Challenge.")
    bits: int
    expires_at: Timestamp


class PublicApp(BaseModel):
    """What a visitor sees: the form, never the graph or its credentials."""

    slug: str
    title: str
    description: str
    cover_url: str | None
    inputs: list[FormField]
    outputs: list[AppOutput]
    password_required: bool
    challenge: Challenge | None = Field(
        default=None, description="Each run must carry its solution; a new one per run."
    )


class PublicAppCard(BaseModel):
    """A public app as the gallery lists it: what its page shows before the form."""

    slug: str
    title: str
    description: str
    cover_url: str | None = Field(description="Signed, expiring address of the cover image.")
    url: str = Field(description="The app's page.")
    password_required: bool


class VisitorRunAccepted(BaseModel):
    run_id: str
    status: str
    visitor_token: str = Field(description="Reads this run; shown once, kept by the visitor.")
    estimated_credits: int


class VisitorOutput(BaseModel):
    node_id: str
    label: str
    status: str
    content_type: str | None = None
    url: str | None = Field(default=None, description="Signed, expiring download address.")
    text: str | None = None


class VisitorRun(BaseModel):
    run_id: str
    status: str
    progress: float = Field(description="Share of the run's nodes that have finished, 0..1.")
    created_at: Timestamp
    finished_at: Timestamp | None
    duration_ms: int | None
    error: dict[str, str] | None
    outputs: list[VisitorOutput]

"""Request and response bodies for accounts, log-in and API keys."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from nodeloom.timestamps import Timestamp

_EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]+\.[^@\s]+$")


def _email(value: str) -> str:
    value = value.strip().lower()
    if len(value) > 320 or not _EMAIL.match(value):
        raise ValueError("must be an e-mail address")
    return value


Email = Annotated[str, AfterValidator(_email)]


class SignupRequest(BaseModel):
    email: Email
    password: str = Field(min_length=8, max_length=128, repr=False)


class LoginRequest(BaseModel):
    email: Email
    password: str = Field(max_length=1024, repr=False)


class PasswordChange(BaseModel):
    current_password: str = Field(max_length=1024, repr=False)
    new_password: str = Field(min_length=8, max_length=128, repr=False)


class AccountOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    email: str
    plan: Literal["free", "pro", "business", "enterprise"]
    credits_balance: int
    created_at: Timestamp
    operator: bool = Field(
        default=False,
        description="Whether the account is one of the server's operators (the operator "
        "pages: NODELOOM_OPERATOR_EMAILS, else the first account).",
    )


class TokenOut(BaseModel):
    access_token: str
    token_type: Literal["bearer"] = "bearer"  # noqa: S105 - the OAuth token type, not a secret
    expires_in: int


class ApiKeyCreate(BaseModel):
    # A name says where the key is used when it has to be revoked: blank is refused, not
    # replaced by a made-up one.
    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class ApiKeyOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    prefix: str
    created_at: Timestamp
    last_used_at: Timestamp | None
    revoked_at: Timestamp | None


class ApiKeyCreated(BaseModel):
    id: str
    name: str
    key: str = Field(description="The key itself. Shown only in this response.")
    prefix: str
    created_at: Timestamp


class SetupStatus(BaseModel):
    setup_required: bool = Field(
        description="No account exists yet: the next sign-up creates the owner account."
    )
    signup_enabled: bool = Field(description="Whether sign-up is open once the owner exists.")


class LedgerEntryOut(BaseModel):
    id: int
    kind: Literal["grant", "hold", "charge", "release"]
    amount: int = Field(description="Credits, as recorded (never negative for holds).")
    balance_change: int = Field(
        description="How the entry moved the balance: -amount for a hold, +amount for a grant "
        "or a release, 0 for a charge (it was held already)."
    )
    run_id: str | None
    node_id: str | None
    note: str | None
    created_at: Timestamp

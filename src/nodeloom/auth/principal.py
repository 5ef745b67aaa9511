"""Who is calling: the account behind a request's credential."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Plan(StrEnum):
    FREE = "free"
    PRO = "pro"
    BUSINESS = "business"
    ENTERPRISE = "enterprise"


class CredentialKind(StrEnum):
    API_KEY = "api_key"
    JWT = "jwt"


@dataclass(frozen=True)
class Principal:
    account_id: str
    plan: Plan
    via: CredentialKind
    api_key_id: str | None = None

    @property
    def rate_key(self) -> str:
        """The bucket this request counts against: the key for API keys, the account for JWTs."""
        if self.via is CredentialKind.API_KEY:
            return f"key:{self.api_key_id}"
        return f"jwt:{self.account_id}"

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
    token_version: int = 0  # of the account, when the credential is a JWT

    @property
    def account_rate_key(self) -> str:
        """Every request of the account counts here, whatever its credential."""
        return account_rate_key(self.account_id)

    @property
    def key_rate_key(self) -> str | None:
        """Requests made with an API key also count against the key itself."""
        if self.via is CredentialKind.API_KEY:
            return f"key:{self.api_key_id}"
        return None


def account_rate_key(account_id: str) -> str:
    """The rate-limit window every request of the account counts in (and every run one of
    its schedules starts)."""
    return f"account:{account_id}"

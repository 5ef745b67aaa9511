"""The domain exception tree. Domain code raises these; ``api/problems.py`` alone maps them to
RFC 9457 problem+json responses.

    NodeloomError
    ├── ConfigurationError          settings that cannot work (not a client error)
    └── ProblemError                anything a client can cause; carries status and code
        ├── InvalidRequest          400 invalid_request (with pointer errors)
        │   └── InvalidGraph        400 invalid_graph
        ├── Unauthorized            401 unauthorized
        ├── InvalidCredentials      401 invalid_credentials
        ├── InvalidSignature        401 invalid_signature (a provider's webhook delivery)
        ├── InsufficientCredits     402 insufficient_credits
        ├── StorageQuotaExceeded    402 storage_quota_exceeded
        ├── AppBudgetExhausted      402 app_budget_exhausted (an app's own budget)
        ├── Forbidden               403 forbidden
        │   ├── JwtRequired         403 jwt_required
        │   ├── PlanUpgradeRequired 403 plan_upgrade_required
        │   ├── WebhookInactive     403 webhook_inactive
        │   ├── ChallengeFailed     403 challenge_failed (an app's proof of work)
        │   └── BadSignature        403 forbidden (signed webhooks' signatures)
        ├── NotFound                404 not_found
        ├── Conflict                409 conflict
        │   └── AssetInUse          409 asset_in_use
        ├── PreconditionFailed      412 precondition_failed (If-Match: a lost update)
        ├── PayloadTooLarge         413 payload_too_large
        │   └── MediaLimitExceeded  413 media_limit_exceeded (pixels, length)
        ├── UnsupportedMediaType    415 unsupported_media_type
        │   └── UnsupportedMedia    415 unsupported_media (content we do not take)
        ├── MediaUnreadable         422 media_unreadable (damaged, truncated)
        ├── MediaFetchFailed        422 media_fetch_failed (a run input's URL not fetched)
        ├── RangeNotSatisfiable     416 range_not_satisfiable
        ├── IdempotencyKeyReused    422 idempotency_key_reused (same key, another request)
        ├── RateLimited             429 rate_limited
        └── ServiceUnavailable      503 service_unavailable (database busy; retry)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Self


class NodeloomError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigurationError(NodeloomError):
    """The settings cannot work; raised at start-up, never answered to a client."""


@dataclass(frozen=True)
class FieldError:
    """One problem in a request body, located by a JSON Pointer into the request."""

    pointer: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"pointer": self.pointer, "message": self.message}


class ProblemError(NodeloomError):
    status: ClassVar[int] = 400
    code: ClassVar[str] = "invalid_request"
    title: ClassVar[str] = "Invalid request"

    def __init__(
        self,
        detail: str,
        *,
        errors: list[FieldError] | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors or []
        self.headers = headers or {}
        self.extra = extra or {}


class InvalidRequest(ProblemError):
    @classmethod
    def listing(cls, lead: str, errors: list[FieldError]) -> Self:
        """The error whose detail is ``lead`` followed by the message of each of ``errors``."""
        return cls(lead + "; ".join(e.message for e in errors), errors=errors)


class InvalidGraph(InvalidRequest):
    code = "invalid_graph"
    title = "Invalid graph"


class Unauthorized(ProblemError):
    status = 401
    code = "unauthorized"
    title = "Unauthorized"

    def __init__(self, detail: str = "Missing or invalid credentials.") -> None:
        super().__init__(detail, headers={"WWW-Authenticate": "Bearer"})


class InvalidCredentials(ProblemError):
    status = 401
    code = "invalid_credentials"
    title = "Invalid credentials"


class InvalidSignature(ProblemError):
    """A provider's webhook delivery whose Standard Webhooks signature is missing, malformed,
    stale or wrong (api/routes/provider_hooks.py)."""

    status = 401
    code = "invalid_signature"
    title = "Invalid signature"


class InsufficientCredits(ProblemError):
    status = 402
    code = "insufficient_credits"
    title = "Insufficient credits"

    def __init__(self, required: int, available: int) -> None:
        super().__init__(
            f"This run needs {required} credits; {available} are available.",
            extra={"required": required, "available": available},
        )


class StorageQuotaExceeded(ProblemError):
    status = 402
    code = "storage_quota_exceeded"
    title = "Storage quota exceeded"

    def __init__(self, needed: int, used: int, quota: int) -> None:
        super().__init__(
            f"This file needs {needed} bytes; the account holds {used} of its {quota}.",
            extra={"needed": needed, "used": used, "quota": quota},
        )


class AppBudgetExhausted(ProblemError):
    """A workflow app spent the credits its owner allowed it (per day or in total)."""

    status = 402
    code = "app_budget_exhausted"
    title = "App budget exhausted"


class Forbidden(ProblemError):
    status = 403
    code = "forbidden"
    title = "Forbidden"


class JwtRequired(Forbidden):
    code = "jwt_required"
    title = "JWT required"


class PlanUpgradeRequired(Forbidden):
    code = "plan_upgrade_required"
    title = "Plan upgrade required"


class WebhookInactive(Forbidden):
    code = "webhook_inactive"
    title = "Webhook inactive"


class ChallengeFailed(Forbidden):
    """An app asks for a proof of work and the run came without a valid, unexpired, unused
    solution (``reason``: missing, invalid, expired, wrong or used)."""

    code = "challenge_failed"
    title = "Proof of work needed"


class BadSignature(Forbidden):
    title = "Bad signature"


class NotFound(ProblemError):
    status = 404
    code = "not_found"
    title = "Not found"


class Conflict(ProblemError):
    status = 409
    code = "conflict"
    title = "Conflict"


class AssetInUse(Conflict):
    code = "asset_in_use"
    title = "Asset in use"


class PreconditionFailed(ProblemError):
    status = 412
    code = "precondition_failed"
    title = "Precondition failed"


class PayloadTooLarge(ProblemError):
    status = 413
    code = "payload_too_large"
    title = "Payload too large"


class UnsupportedMediaType(ProblemError):
    status = 415
    code = "unsupported_media_type"
    title = "Unsupported media type"


class MediaLimitExceeded(PayloadTooLarge):
    code = "media_limit_exceeded"
    title = "Media limit exceeded"


class UnsupportedMedia(UnsupportedMediaType):
    code = "unsupported_media"
    title = "Unsupported media"


class MediaUnreadable(ProblemError):
    status = 422
    code = "media_unreadable"
    title = "Media unreadable"


class MediaFetchFailed(ProblemError):
    status = 422
    code = "media_fetch_failed"
    title = "Media fetch failed"


class RangeNotSatisfiable(ProblemError):
    status = 416
    code = "range_not_satisfiable"
    title = "Range not satisfiable"


class IdempotencyKeyReused(ProblemError):
    status = 422
    code = "idempotency_key_reused"
    title = "Idempotency key reused"


class RateLimited(ProblemError):
    status = 429
    code = "rate_limited"
    title = "Too many requests"


class ProviderError(ProblemError):
    """A provider the server called for the caller (with their credential) refused or
    failed; ``detail`` quotes it."""

    status = 502
    code = "provider_error"
    title = "Provider error"


class ServiceUnavailable(ProblemError):
    status = 503
    code = "service_unavailable"
    title = "Service unavailable"

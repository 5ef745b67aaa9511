"""What the client raises. An answer with an error status becomes the ``APIError`` subclass
named after its problem ``code`` (docs/errors.md lists them all):

    NodeloomClientError
    ├── ConnectionFailed              the server could not be reached (or the connection broke)
    ├── WaitTimeout                   run.wait() gave up waiting; the run itself goes on
    ├── RunFailed                     nodeloom.run(): the run ended "failed" (.run)
    ├── AmbiguousWorkflow             a workflow name that several workflows share
    └── APIError                      a problem+json answer: .status .code .title .detail
        ├── InvalidRequest            400 invalid_request (.errors: pointer problems)
        │   └── InvalidGraph          400 invalid_graph
        ├── Unauthorized              401 unauthorized
        ├── InvalidCredentials        401 invalid_credentials
        ├── InvalidSignature          401 invalid_signature
        ├── InsufficientCredits       402 insufficient_credits (.required, .available)
        ├── StorageQuotaExceeded      402 storage_quota_exceeded
        ├── AppBudgetExhausted        402 app_budget_exhausted
        ├── Forbidden                 403 forbidden
        │   ├── JwtRequired           403 jwt_required
        │   ├── PlanUpgradeRequired   403 plan_upgrade_required
        │   ├── WebhookInactive       403 webhook_inactive
        │   └── ChallengeFailed       403 challenge_failed (.reason)
        ├── NotFound                  404 not_found
        ├── MethodNotAllowed          405 method_not_allowed
        ├── Conflict                  409 conflict
        │   └── AssetInUse            409 asset_in_use
        ├── PreconditionFailed        412 precondition_failed (.current_version)
        ├── PayloadTooLarge           413 payload_too_large
        │   └── MediaLimitExceeded    413 media_limit_exceeded
        ├── UnsupportedMediaType      415 unsupported_media_type
        │   └── UnsupportedMedia      415 unsupported_media
        ├── MediaUnreadable           422 media_unreadable
        ├── MediaFetchFailed          422 media_fetch_failed
        ├── RangeNotSatisfiable       416 range_not_satisfiable
        ├── IdempotencyKeyReused      422 idempotency_key_reused
        ├── RateLimited               429 rate_limited (.retry_after)
        ├── InternalError             500 internal_error
        ├── ProviderError             502 provider_error
        └── ServiceUnavailable        503 service_unavailable (.retry_after)

The tree mirrors the server's (``nodeloom.errors``), so ``except Forbidden`` also catches the
more specific 403s. A code this client does not know yet (a newer server) becomes the class of
its status, or ``APIError`` itself.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from nodeloom.schemas.runs import RunOut

# The run a RunFailed carries: ``nodeloom.run`` raises it with its ``Run`` (_sync.py), whose
# module sits above this one.
R = TypeVar("R", bound=RunOut)


class NodeloomClientError(Exception):
    """Base of everything the client raises on purpose."""


class ConnectionFailed(NodeloomClientError):
    """The server could not be reached, or the connection broke before an answer."""


class WaitTimeout(NodeloomClientError, TimeoutError):
    """``wait()`` ran out of time. The run is not cancelled; wait again or cancel it."""

    def __init__(self, run_id: str, seconds: float) -> None:
        super().__init__(f"run {run_id} still running after {seconds:g} s")
        self.run_id = run_id


class RunFailed(NodeloomClientError, Generic[R]):
    """``nodeloom.run`` waited for a run that ended ``failed``; ``.run`` has every node."""

    def __init__(self, run: R) -> None:
        error = run.error
        reason = f"{error.code}: {error.message}" if error else "failed"
        where = f" (node {error.node_id})" if error and error.node_id else ""
        super().__init__(f"run {run.id} failed{where}: {reason}")
        self.run = run


class AmbiguousWorkflow(NodeloomClientError):
    """A workflow named by name, when more than one workflow has that name."""

    def __init__(self, name: str, ids: list[str]) -> None:
        super().__init__(f"{len(ids)} workflows are named {name!r}; use an id: {', '.join(ids)}")
        self.ids = ids


@dataclass(frozen=True)
class FieldProblem:
    """One problem in a request, located by a JSON Pointer (``/graph_json/edges/3/target``)."""

    pointer: str
    message: str


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date (RFC 9110)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        moment = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - time.time())


class APIError(NodeloomClientError):
    """An error answer. ``problem`` is the whole problem+json body."""

    status: ClassVar[int] = 0
    code: ClassVar[str] = ""

    def __init__(
        self, status: int, problem: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        self.http_status = status
        self.problem = dict(problem)
        self.headers = {name.lower(): value for name, value in (headers or {}).items()}
        self.title = str(problem.get("title") or "")
        self.detail = str(problem.get("detail") or self.title or f"HTTP {status}")
        self.type = str(problem.get("type") or "")
        self.problem_code = str(problem.get("code") or "")
        raw = problem.get("errors")
        self.errors = [
            FieldProblem(str(e.get("pointer", "")), str(e.get("message", "")))
            for e in (raw if isinstance(raw, list) else [])
            if isinstance(e, Mapping)
        ]
        self.retry_after = retry_after_seconds(self.headers.get("retry-after"))
        super().__init__(f"{status} {self.problem_code or 'error'}: {self.detail}")


class InvalidRequest(APIError):
    status, code = 400, "invalid_request"


class InvalidGraph(InvalidRequest):
    status, code = 400, "invalid_graph"


class Unauthorized(APIError):
    status, code = 401, "unauthorized"


class InvalidCredentials(APIError):
    status, code = 401, "invalid_credentials"


class InvalidSignature(APIError):
    status, code = 401, "invalid_signature"


class InsufficientCredits(APIError):
    status, code = 402, "insufficient_credits"

    @property
    def required(self) -> int | None:
        value = self.problem.get("required")
        return value if isinstance(value, int) else None

    @property
    def available(self) -> int | None:
        value = self.problem.get("available")
        return value if isinstance(value, int) else None


class StorageQuotaExceeded(APIError):
    status, code = 402, "storage_quota_exceeded"


class AppBudgetExhausted(APIError):
    status, code = 402, "app_budget_exhausted"


class Forbidden(APIError):
    status, code = 403, "forbidden"


class JwtRequired(Forbidden):
    status, code = 403, "jwt_required"


class PlanUpgradeRequired(Forbidden):
    status, code = 403, "plan_upgrade_required"


class WebhookInactive(Forbidden):
    status, code = 403, "webhook_inactive"


class ChallengeFailed(Forbidden):
    status, code = 403, "challenge_failed"

    @property
    def reason(self) -> str | None:
        """missing, invalid, expired, wrong or used."""
        value = self.problem.get("reason")
        return value if isinstance(value, str) else None


class NotFound(APIError):
    status, code = 404, "not_found"


class MethodNotAllowed(APIError):
    status, code = 405, "method_not_allowed"


class Conflict(APIError):
    status, code = 409, "conflict"


class AssetInUse(Conflict):
    status, code = 409, "asset_in_use"


class PreconditionFailed(APIError):
    """A save whose ``If-Match`` names a version that is no longer the current one: someone
    else saved in between. ``current_version`` is the version now saved."""

    status, code = 412, "precondition_failed"

    @property
    def current_version(self) -> int | None:
        value = self.problem.get("current_version")
        return value if isinstance(value, int) else None


class PayloadTooLarge(APIError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(APIError):
    status, code = 415, "unsupported_media_type"


class MediaLimitExceeded(PayloadTooLarge):
    status, code = 413, "media_limit_exceeded"


class UnsupportedMedia(UnsupportedMediaType):
    status, code = 415, "unsupported_media"


class RangeNotSatisfiable(APIError):
    status, code = 416, "range_not_satisfiable"


class IdempotencyKeyReused(APIError):
    status, code = 422, "idempotency_key_reused"


class MediaUnreadable(APIError):
    status, code = 422, "media_unreadable"


class MediaFetchFailed(APIError):
    status, code = 422, "media_fetch_failed"


class RateLimited(APIError):
    status, code = 429, "rate_limited"


class InternalError(APIError):
    status, code = 500, "internal_error"


class ProviderError(APIError):
    status, code = 502, "provider_error"


class ServiceUnavailable(APIError):
    status, code = 503, "service_unavailable"


def _subclasses(cls: type[APIError]) -> list[type[APIError]]:
    found: list[type[APIError]] = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


BY_CODE: dict[str, type[APIError]] = {cls.code: cls for cls in _subclasses(APIError)}
# For codes this client does not know: the first direct subclass of each status, in the order
# above, is the general one (Unauthorized before InvalidCredentials).
_BY_STATUS: dict[int, type[APIError]] = {}
for _cls in APIError.__subclasses__():
    _BY_STATUS.setdefault(_cls.status, _cls)


def error_for(
    status: int, problem: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> APIError:
    """The exception for an error answer: by its ``code``, else by its status."""
    cls = BY_CODE.get(str(problem.get("code") or "")) or _BY_STATUS.get(status, APIError)
    return cls(status, problem, headers)

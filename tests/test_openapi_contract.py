"""Contract test: schemathesis against the real app, in-process, with real credentials.

Proves two things about every operation in ``/api/v1/openapi.json``:

* no request a client can send produces a 5xx (``not_a_server_error``);
* the document is truthful: status codes, content types, response bodies and headers match
  what is documented (no 422: validation errors are 400), and every 4xx is
  ``application/problem+json`` with a snake_case ``code`` and its ``status``.

Cases are drawn with Hypothesis (derandomized, bounded) from schemathesis' strategies and sent
through the ``client`` fixture's ASGI transport, on the event loop that owns the app, then
validated with ``case.validate_response``. Path parameters are real ids (a workflow, a finished
run, its artifact, a webhook, a spare API key) for most cases, random for the rest, so both
the 2xx and the 404 answers are exercised.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from hypothesis.strategies import SearchStrategy
from schemathesis import Case, GenerationMode
from schemathesis.checks import CheckContext, not_a_server_error
from schemathesis.core.transport import Response as StResponse
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import User, text_graph
from tests.media_files import image_bytes

POSITIVE_EXAMPLES = 25  # per operation, with real path parameters
NEGATIVE_EXAMPLES = 25  # per operation, schema-violating data
RANDOM_ID_EXAMPLES = 8  # per operation with path parameters, random ids
ANONYMOUS_EXAMPLES = 3  # per secured operation, without credentials
BASE_URL = "http://testserver"
CODE = re.compile(r"^[a-z][a-z0-9_]*$")
INVALID_HEADER = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """Both databases: an input one of them refuses (a NUL, say) must still be a 4xx."""
    return str(request.param)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 10**9, "rate_limit_jwt": 10**9, "rate_limit_webhook": 10**9}


# The tus PATCH body is raw bytes under its own media type.
schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")


def problem_details(ctx: CheckContext, response: StResponse, case: Case) -> bool | None:
    """Every error is problem+json with a snake_case ``code`` and its status."""
    status = response.status_code
    if status < 400:
        return None
    content_type = response.headers.get("content-type", [""])[0]
    assert content_type.split(";")[0].strip() == "application/problem+json", (
        f"{status} answered with Content-Type {content_type!r}, not application/problem+json"
    )
    if case.method.upper() == "HEAD":
        return None  # a HEAD answer has no body (the tus upload's HEAD)
    body = response.json()
    assert isinstance(body, dict), f"{status} problem body is not an object: {body!r}"
    for key in ("type", "title", "detail", "code"):
        assert isinstance(body.get(key), str), f"{status} problem without a string {key!r}"
    assert CODE.match(body["code"]), f"{status} problem code {body['code']!r} is not snake_case"
    assert body.get("status") == status, f"problem status {body.get('status')} != {status}"
    assert status != 422 or body["code"] == "idempotency_key_reused", (
        "422 is only for a reused Idempotency-Key: validation errors are 400"
    )
    return None


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    problem_details,
]


def draw(strategy: SearchStrategy[Case], count: int) -> list[Case]:
    """Hypothesis drives sync functions: draw the cases first, send them afterwards."""
    cases: list[Case] = []

    @hypothesis_settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(case: Case) -> None:
        cases.append(case)

    try:
        collect()
    except Unsatisfiable:
        # Negative mode for an operation with nothing left to negate (no parameters or body,
        # or only fixed path parameters): there is no invalid request to draw.
        assert not cases
    return cases


def sendable(headers: dict[str, str]) -> bool:
    """Whether HTTP can carry these headers (latin-1, no control characters), as schemathesis'
    own transports require; negative cases may draw header values that no client can send."""
    for name, value in headers.items():
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            return False
        if INVALID_HEADER.search(name) or INVALID_HEADER.search(value):
            return False
    return True


def curl(case: Case, real: dict[str, str]) -> str:
    return swapped(case.as_curl_command(base_url=BASE_URL), real)


def swapped(value: str, real: dict[str, str]) -> str:
    # Longest first: one stand-in may begin another (standincredential, standincredentialid).
    for standin in sorted(real, key=len, reverse=True):
        value = value.replace(standin, real[standin])
    return value


async def send(
    client: httpx.AsyncClient, case: Case, real: dict[str, str]
) -> tuple[httpx.Response, dict[str, Any]] | None:
    """The case with its stand-ins swapped for ``real`` values (stand-in -> value)."""
    kwargs = case.as_transport_kwargs(base_url=BASE_URL)
    kwargs["url"] = swapped(kwargs["url"], real)
    kwargs["headers"] = {k: swapped(str(v), real) for k, v in (kwargs.get("headers") or {}).items()}
    request_headers = dict(kwargs["headers"])
    if not sendable(request_headers):
        return None
    cookies = kwargs.get("cookies") or {}
    if cookies:
        request_headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
    content: bytes | str | None = None
    if "json" in kwargs:
        response = await client.request(
            kwargs["method"],
            kwargs["url"],
            params=kwargs.get("params"),
            headers=request_headers,
            json=kwargs["json"],
        )
        return response, kwargs
    data = kwargs.get("data")
    if isinstance(data, bytes | str):
        content = data
    elif data is not None:
        raise AssertionError(f"unexpected body to send: {data!r}")
    response = await client.request(
        kwargs["method"],
        kwargs["url"],
        params=kwargs.get("params"),
        headers=request_headers,
        content=content,
    )
    return response, kwargs


async def wait_finished(client: httpx.AsyncClient, owner: User, url: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        body: dict[str, Any] = (await client.get(url, headers=owner.headers)).json()
        if body["status"] != "running":
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"run did not finish: {url}")


async def wait_listed(client: httpx.AsyncClient, owner: User) -> str:
    """The id of the account's first pending approval, once its node waits."""
    for _ in range(600):
        r = await client.get("/api/v1/approvals", headers=owner.headers)
        if r.json()["data"]:
            return str(r.json()["data"][0]["id"])
        await asyncio.sleep(0.05)
    raise AssertionError("no approval listed")


async def real_ids(client: httpx.AsyncClient, owner: User) -> dict[str, str]:
    async def post(path: str, body: object, headers: dict[str, str]) -> dict[str, Any]:
        r = await client.post(f"/api/v1{path}", json=body, headers=headers)
        assert r.status_code in (201, 202), r.text
        result: dict[str, Any] = r.json()
        return result

    workflow = await post(
        "/workflows", {"name": "contract", "graph_json": text_graph()}, owner.headers
    )
    victim = await post("/workflows", {"name": "victim", "graph_json": text_graph()}, owner.headers)
    run = await post(f"/workflows/{workflow['id']}/execute", {"input": {}}, owner.headers)
    done = await wait_finished(
        client, owner, f"/api/v1/workflows/{workflow['id']}/runs/{run['run_id']}"
    )
    assert done["status"] == "completed", done
    artifact = next(n["artifact_id"] for n in done["node_runs"] if n["artifact_id"])
    webhook = await post(f"/workflows/{workflow['id']}/webhooks", {"name": "hook"}, owner.headers)
    schedule = await post(
        f"/workflows/{workflow['id']}/schedules", {"name": "s", "cron": "0 3 * * *"}, owner.headers
    )
    spare_key = await post("/api-keys", {"name": "spare"}, owner.jwt_headers)
    published = {"workflow_id": workflow["id"], "title": "a", "outputs": [{"node_id": "tpl"}]}
    app = await post("/apps", published, owner.headers)
    # Loopback and not allow-listed: its connection test is refused before any traffic.
    fields = {"base_url": "http://127.0.0.1:9/v1", "api_key": "sk-contract-000000"}
    credential = await post(
        "/credentials", {"name": "c", "kind": "openai", "fields": fields}, owner.headers
    )
    gated = {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
            {"id": "gate", "type": "Approval", "position": {"x": 1, "y": 0}, "data": {}},
        ],
        "edges": [{"id": "e", "source": "in", "target": "gate"}],
        "viewport": {"x": 0, "y": 0, "zoom": 1},
    }
    waiting = await post("/workflows", {"name": "gated", "graph_json": gated}, owner.headers)
    await post(f"/workflows/{waiting['id']}/execute", {"input": {}}, owner.headers)
    approval = await wait_listed(client, owner)
    png = image_bytes("PNG", size=(8, 8))
    r = await client.post(
        "/api/v1/uploads", files={"file": ("a.png", png, "image/png")}, headers=owner.headers
    )
    assert r.status_code == 201, r.text
    tus = await client.post(
        "/api/v1/uploads/tus",
        headers={**owner.headers, "Tus-Resumable": "1.0.0", "Upload-Length": "100"},
    )
    assert tus.status_code == 201, tus.text
    return {
        "asset_id": r.json()["id"],
        "upload_id": tus.headers["location"].rsplit("/", 1)[-1],
        "workflow_id": workflow["id"],
        "victim_workflow_id": victim["id"],
        "run_id": run["run_id"],
        "artifact_id": artifact,
        "webhook_id": webhook["id"],
        "schedule_id": schedule["id"],
        "token": webhook["token"],
        "key_id": spare_key["id"],
        "credential_id": credential["id"],
        "approval_id": approval,
        "app_id": app["id"],
        "slug": app["slug"],
        "version": "1",  # of a workflow (every workflow has its version 1)
        "part": "content",  # of an asset (/api/v1/assets/{asset_id}/{part})
        "code": "insufficient_credits",  # a problem code (/api/v1/problems/{code})
        "server_id": "0" * 32,  # a ComfyUI server of no fleet here: 404
        "action": "drain",  # of a ComfyUI server (/.../{server_id}/{action})
    }


# Cases are drawn with stand-ins for the real ids and credentials, which `send` swaps for
# this database's real ones: the draws (most of this test's CPU) are then the same for both
# databases, and made once per process. Lower-case letters only, so no encoding changes them.
DRAWN: dict[str, list[tuple[str, list[Case]]]] = {}


def stand_in(name: str) -> str:
    return "standin" + re.sub(r"[^a-z]", "", name.lower())


def draw_batches(
    operation: Any, fixed: dict[str, str], auth: dict[str, str]
) -> list[tuple[str, list[Case]]]:
    """The operation's batches of cases, drawn once per process: ``fixed`` and ``auth``
    hold stand-ins, the same for every database."""
    key = f"{operation.label} {sorted(fixed.items())} {sorted(auth.items())}"
    if key not in DRAWN:
        DRAWN[key] = _draw_batches(operation, fixed, auth)
    return DRAWN[key]


def _draw_batches(
    operation: Any, fixed: dict[str, str], auth: dict[str, str]
) -> list[tuple[str, list[Case]]]:
    """Credentials go in at generation, so negative cases can still drop or spoil them."""

    def strategy(
        mode: GenerationMode = GenerationMode.POSITIVE, path: dict[str, str] | None = fixed
    ) -> SearchStrategy[Case]:
        return operation.as_strategy(mode, path_parameters=path, headers=dict(auth))  # type: ignore[no-any-return]

    batches = [
        ("positive", draw(strategy(), POSITIVE_EXAMPLES)),
        ("negative", draw(strategy(GenerationMode.NEGATIVE), NEGATIVE_EXAMPLES)),
    ]
    if fixed:
        batches.append(("random ids", draw(strategy(path=None), RANDOM_ID_EXAMPLES)))
    if operation.security:
        anonymous = operation.as_strategy(path_parameters=fixed)
        batches.append(("anonymous", draw(anonymous, ANONYMOUS_EXAMPLES)))
    return batches


def _order(label: str) -> tuple[int, str]:
    # The trigger first, while its webhook is active and unsigned (PATCH may change that);
    # deletions last (webhooks before their workflow), so the real ids live long enough.
    if label == "POST /api/v1/webhooks/{token}":
        return -1, label
    if label.startswith("DELETE /api/v1/workflows/{workflow_id}/webhooks"):
        return 1, label
    if label.startswith("DELETE /api/v1/workflows/{workflow_id}/schedules"):
        return 1, label
    if label.startswith("DELETE"):
        return 2, label
    return 0, label


# Minutes of CPU when four test processes share two cores: slow (scheduled first), and a
# timeout that finds a hang without failing a slow machine.
@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_openapi_contract(client: httpx.AsyncClient, owner: User) -> None:
    started = time.monotonic()
    r = await client.get("/api/v1/openapi.json")
    assert r.status_code == 200
    schema = schemathesis.openapi.from_dict(r.json())
    ids = await real_ids(client, owner)

    operations = [result.ok() for result in schema.get_all_operations()]
    operations.sort(key=lambda op: _order(op.label))
    failures: dict[tuple[str, str], str] = {}
    sent = unsendable = 0
    statuses: dict[str, set[int]] = {}

    for operation in operations:
        label = operation.label
        names = [p.name for p in operation.path_parameters]
        id_names = {name: name for name in names}
        if label == "DELETE /api/v1/workflows/{workflow_id}":
            id_names["workflow_id"] = "victim_workflow_id"
        fixed = {name: stand_in(id_name) for name, id_name in id_names.items()}
        credential = owner.jwt if "/api-keys" in operation.path else owner.api_key
        auth = {"Authorization": f"Bearer {stand_in('credential')}"}
        real = {stand_in(id_name): ids[id_name] for id_name in id_names.values()}
        real[stand_in("credential")] = credential

        batches = draw_batches(operation, fixed, auth)
        for mode, cases in batches:
            checks: list[Callable[..., bool | None]] = list(CHECKS)
            if mode == "negative":
                checks.append(negative_data_rejection)
            for case in cases:
                try:
                    outcome = await send(client, case, real)
                except Exception as exc:  # the app raised through the transport
                    key = (label, f"unhandled {type(exc).__name__}: {exc}")
                    failures.setdefault(key, f"{key[1]}\n{curl(case, real)}")
                    continue
                if outcome is None:
                    unsendable += 1
                    continue
                response, kwargs = outcome
                sent += 1
                statuses.setdefault(label, set()).add(response.status_code)
                try:
                    case.validate_response(response, checks=checks, transport_kwargs=kwargs)
                except (AssertionError, BaseExceptionGroup) as exc:
                    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    key = (label, f"{type(exc).__name__}: {first_line}")
                    failures.setdefault(key, f"{exc}\n{curl(case, real)}")

    elapsed = time.monotonic() - started
    print(f"\n{sent} requests ({unsendable} unsendable cases left out) in {elapsed:.1f} s")
    for label, codes in statuses.items():
        print(label, sorted(codes))
    report = "\n\n".join(f"[{label}] {detail}" for (label, _), detail in failures.items())
    assert not failures, f"{len(failures)} contract failure(s):\n\n{report}"

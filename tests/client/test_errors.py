"""Each problem code arrives as its own exception class, provoked on a real server where a
client can provoke it; 429 is retried honouring Retry-After, within bounds."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodeloom.client import Client, errors
from nodeloom.client._core import backoff_seconds
from nodeloom.problem_catalog import PROBLEMS
from tests.client.conftest import Account, Live, cli, greeting, live_server
from tests.runs_helpers import g, n


def _artifact(nl: Client) -> str:
    wf = nl.workflows.create({"name": "g", "graph_json": greeting()})
    artifact_id = nl.workflows.execute(wf.id).wait(timeout=30).node_runs[1].artifact_id
    assert artifact_id is not None
    return artifact_id


def _hook_token(nl: Client, active: bool, secret: str | None = None) -> str:
    wf = nl.workflows.create({"name": "g", "graph_json": greeting()})
    return nl.webhooks.create(wf.id, "h", active=active, secret=secret).token


PROVOKE: dict[str, Callable[[Client, Live, Account], object]] = {
    "invalid_request": lambda nl, live, acc: nl.request("GET", "/workflows", params={"limit": 0}),
    "invalid_graph": lambda nl, live, acc: nl.workflows.create({"name": "x", "graph_json": {}}),
    "unauthorized": lambda nl, live, acc: Client(live.url, "nlk_" + "x" * 43).me(),
    "invalid_credentials": lambda nl, live, acc: Client.login(live.url, acc.email, "wrong pass"),
    "insufficient_credits": lambda nl, live, acc: nl.workflows.execute(
        nl.workflows.create(
            {
                "name": "costly",
                "graph_json": g([n(f"t{i}", "ToneGenerator", seconds=600) for i in range(2)], []),
            }
        ).id
    ),
    # A signed webhook triggered without its signature (a bad signed download URL is 401).
    "forbidden": lambda nl, live, acc: nl.request(
        "POST", f"/webhooks/{_hook_token(nl, True, secret='s' * 32)}", json={}, auth=False
    ),
    "jwt_required": lambda nl, live, acc: nl.keys.create("nope"),
    "webhook_inactive": lambda nl, live, acc: nl.request(
        "POST", f"/webhooks/{_hook_token(nl, False)}", json={}, auth=False
    ),
    "not_found": lambda nl, live, acc: nl.workflows.get(str(uuid.uuid4())),
    "method_not_allowed": lambda nl, live, acc: nl.request("DELETE", "/me"),
    "conflict": lambda nl, live, acc: nl.request(
        "POST", "/auth/signup", json={"email": acc.email, "password": acc.password}, auth=False
    ),
    "payload_too_large": lambda nl, live, acc: nl.workflows.execute(
        nl.workflows.create({"name": "g", "graph_json": greeting()}).id, {"text": "x" * 1_100_000}
    ),
    "unsupported_media_type": lambda nl, live, acc: nl.request(
        "POST",
        f"/webhooks/{_hook_token(nl, True)}",
        json={},
        headers={"Content-Type": "text/plain"},
        auth=False,
    ),
    "idempotency_key_reused": lambda nl, live, acc: [
        nl.workflows.execute(
            nl.workflows.create({"name": "g", "graph_json": greeting()}).id,
            {"text": text},
            idempotency_key="once",
        )
        for text in ("first", "second")
    ],
    "range_not_satisfiable": lambda nl, live, acc: nl.request(
        "GET", f"/artifacts/{_artifact(nl)}", headers={"Range": "bytes=999999-"}
    ),
}


@pytest.mark.parametrize("code", sorted(PROVOKE))
def test_each_code_raises_its_class(code: str, nl: Client, live: Live, account: Account) -> None:
    cls = errors.BY_CODE[code]
    with pytest.raises(cls) as raised:
        PROVOKE[code](nl, live, account)
    error = raised.value
    assert type(error) is cls
    assert error.problem_code == code and error.http_status == PROBLEMS[code].status
    assert error.type == f"{live.url}/api/v1/problems/{code}"
    assert error.detail and str(error).startswith(f"{PROBLEMS[code].status} {code}: ")


def test_error_details_are_attributes(nl: Client, live: Live, account: Account) -> None:
    with pytest.raises(errors.InvalidGraph) as invalid:
        nl.workflows.create({"name": "x", "graph_json": {"nodes": [], "edges": []}})
    assert [p.pointer for p in invalid.value.errors] == ["/graph_json/viewport"]
    assert isinstance(invalid.value, errors.InvalidRequest)  # the tree mirrors the server's
    with pytest.raises(errors.InsufficientCredits) as poor:
        PROVOKE["insufficient_credits"](nl, live, account)
    assert poor.value.available == 1000
    assert poor.value.required is not None and poor.value.required > 1000


def test_plan_upgrade_required_after_a_downgrade(nl: Client, live: Live, account: Account) -> None:
    done = cli(
        "accounts",
        "set",
        "--email",
        account.email,
        "--plan",
        "free",
        env={"NODELOOM_DATA_DIR": str(live.data_dir)},
    )
    assert done.returncode == 0, done.stderr
    wf = nl.workflows.create({"name": "g", "graph_json": greeting()})
    with pytest.raises(errors.PlanUpgradeRequired) as raised:
        nl.webhooks.create(wf.id, "h")
    assert isinstance(raised.value, errors.Forbidden)


def test_codes_no_client_request_can_provoke_map_by_code_then_status() -> None:
    """500 and 503 (and codes of a newer server) cannot be caused on purpose; the mapping is
    the same function every answer goes through."""
    internal = errors.error_for(500, {"code": "internal_error", "detail": "boom"})
    assert type(internal) is errors.InternalError
    busy = errors.error_for(503, {"code": "service_unavailable"}, {"Retry-After": "2"})
    assert type(busy) is errors.ServiceUnavailable and busy.retry_after == 2
    assert type(errors.error_for(403, {"code": "brand_new"})) is errors.Forbidden
    assert type(errors.error_for(401, {})) is errors.Unauthorized
    assert type(errors.error_for(418, {"detail": "teapot"})) is errors.APIError
    dated = errors.error_for(429, {}, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})
    assert dated.retry_after == 0.0  # a date in the past: retry now
    assert backoff_seconds(errors.error_for(503, {}), 0) == 0.5
    assert backoff_seconds(errors.error_for(503, {}), 10) == 8.0


# The CLI's first request must come while the window is still full: the window is long
# enough for a CLI to start on a loaded machine (3 s was seen), and the CLI then waits what is
# left of it.
SLOW_WINDOW_SECONDS = 10


@pytest.fixture(scope="module")
def slowly_limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A server with 3 requests per API key per 10 s rolling window."""
    with live_server(
        tmp_path_factory.mktemp("slowly-limited-server"),
        NODELOOM_RATE_LIMIT_API_KEY="3",
        NODELOOM_RATE_LIMIT_WINDOW_SECONDS=str(SLOW_WINDOW_SECONDS),
    ) as server:
        yield server


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A server with 3 requests per API key per 2 s rolling window."""
    with live_server(
        tmp_path_factory.mktemp("limited-server"),
        NODELOOM_RATE_LIMIT_API_KEY="3",
        NODELOOM_RATE_LIMIT_WINDOW_SECONDS="2",
    ) as server:
        yield server


class TestRetries:
    def test_429_is_retried_after_retry_after(
        self, limited: Live, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.WARNING, logger="nodeloom.client")
        account = limited.account()
        with Client(limited.url, account.api_key) as client:
            started = time.monotonic()
            emails = {client.me().email for _ in range(5)}
            elapsed = time.monotonic() - started
        assert emails == {account.email}
        assert 1.0 <= elapsed < 10  # the 4th request waited for the window to move on
        # A wait of a second or more is said, so that it does not look like a hang.
        said = [r.getMessage() for r in caplog.records if r.name == "nodeloom.client"]
        assert said and all(
            m.startswith("GET /me: the server answered 429 Too Many Requests; asking again in")
            for m in said
        ), said

    def test_without_retries_the_error_says_when(self, limited: Live) -> None:
        account = limited.account()
        with Client(limited.url, account.api_key, max_retries=0) as client:
            for _ in range(3):
                client.me()
            with pytest.raises(errors.RateLimited) as limited_error:
                client.me()
        retry_after = limited_error.value.retry_after
        assert retry_after is not None and 1 <= retry_after <= 2

    def test_a_longer_wait_than_allowed_is_not_waited_for(self, limited: Live) -> None:
        account = limited.account()
        with Client(limited.url, account.api_key, max_retry_wait=0.5) as client:
            for _ in range(3):
                client.me()
            started = time.monotonic()
            with pytest.raises(errors.RateLimited):
                client.me()
            assert time.monotonic() - started < 0.5

    def test_the_cli_retries_too(self, slowly_limited: Live, tmp_path: Path) -> None:
        account = slowly_limited.account()
        with Client(slowly_limited.url, account.api_key) as client:
            for _ in range(3):
                client.me()  # the window is full: the CLI's request meets a 429 first
        env: dict[str, str | None] = {
            "NODELOOM_URL": slowly_limited.url,
            "NODELOOM_API_KEY": account.api_key,
            "NODELOOM_CONFIG_DIR": str(tmp_path),
        }
        done = cli("workflows", "list", "--json", env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]"
        assert "the server answered 429 Too Many Requests; asking again in" in done.stderr

"""The log filter that keeps credentials out of every line (nodeloom/logs.py), through real
loggers, handlers and formatters (uvicorn's access formatter included). The end-to-end check
against a real server's log is tests/events/test_log_secrets.py."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import pytest
from starlette.datastructures import URL
from uvicorn.logging import AccessFormatter

from nodeloom import logs
from nodeloom.auth.access_tokens import issue_jwt
from nodeloom.auth.tokens import new_api_key, sign_url
from tests.conftest import TEST_SECRET

JWT = issue_jwt(TEST_SECRET.encode(), "account-1", 60)
API_KEY = new_api_key(TEST_SECRET.encode()).key
SIGNED = sign_url(TEST_SECRET.encode(), "/api/v1/artifacts/a1", 60)
SIG = SIGNED.split("sig=")[1]
HOOK = "Zq3x0_-Kd8s7Ew1yPq2rT5uVw9xY0zA1bC2dE3fG4hI"


def quote_all(text: str) -> str:
    """Every character percent-encoded, as a client may send it."""
    return "".join(f"%{b:02X}" for b in text.encode())


def numbered(cases: list[Any]) -> list[Any]:
    """Cases named by their place: their text holds secrets made at import, which differ in
    each test process, and pytest-xdist's workers must collect the same test names."""
    return [
        pytest.param(*(case if isinstance(case, tuple) else (case,)), id=f"case{i}")
        for i, case in enumerate(cases)
    ]


class TestRedact:
    @pytest.mark.parametrize(
        ("line", "expected"),
        numbered(
            [
                (
                    f'127.0.0.1:5 - "WebSocket /api/v1/ws?token={JWT}" [accepted]',
                    '127.0.0.1:5 - "WebSocket /api/v1/ws?token=[redacted]" [accepted]',
                ),
                (
                    f"GET /api/v1/workflows/w/runs/r/events?after_seq=3&token={API_KEY} HTTP/1.1",
                    "GET /api/v1/workflows/w/runs/r/events?after_seq=3&token=[redacted] HTTP/1.1",
                ),
                (
                    f"GET /api/v1/artifacts/a1?{SIGNED}",
                    f"GET /api/v1/artifacts/a1?{SIGNED.split('sig=')[0]}sig=[redacted]",
                ),
                (f"POST /api/v1/webhooks/{HOOK} 202", "POST /api/v1/webhooks/[redacted] 202"),
                (f"POST /api/v1/webhooks/{HOOK[:9]}?x=1", "POST /api/v1/webhooks/[redacted]?x=1"),
                (
                    f"POST /api/v1/provider-hooks/replicate/{HOOK}.mac 200",
                    "POST /api/v1/provider-hooks/replicate/[redacted] 200",
                ),
                (f"Authorization: Bearer {HOOK}", "Authorization: Bearer [redacted]"),
                (f"key {API_KEY} refused", "key nlk_[redacted] refused"),
                (f"token was {JWT}.", "token was [redacted]."),
                ("GET /api/v1/ws?TOKEN=abc&x=1", "GET /api/v1/ws?TOKEN=[redacted]&x=1"),
            ]
        ),
    )
    def test_secrets_are_replaced(self, line: str, expected: str) -> None:
        assert logs.redact(line) == expected

    @pytest.mark.parametrize(
        "line",
        numbered(
            [
                # The server decodes a query's names and values before it reads them, so
                # ?%74oken=%6Elk_... is ?token=nlk_...: it authenticates, and must not be logged.
                f'127.0.0.1:5 - "WebSocket /api/v1/ws?%74oken={quote_all(API_KEY)}" [accepted]',
                f"GET /api/v1/ws?%74%6F%6B%65%6E={API_KEY}",
                f"GET /api/v1/ws?%54oKeN={JWT}&x=1",
                f"GET /api/v1/ws?x=1%26token%3D{API_KEY}",
                f"GET /api/v1/ws?tok%2565n={quote_all(quote_all(JWT))}",
                f"GET /api/v1/artifacts/a1?exp=1&%73ig={SIG}",
                f"GET /api/v1/artifacts/a1?exp=1&SIG={quote_all(SIG)}",
                f"GET /api/v1/artifacts/a1%3Fexp=1%26sig={SIG}",
                # Whatever path reaches the trigger route, or a 404/405 beside it.
                f"GET //webhooks/{HOOK} HTTP/1.1 405",
                f"GET /api/v1//webhooks/{HOOK} HTTP/1.1 405",
                f"POST /API/V1/Webhooks/{HOOK} 404",
                f"POST /api/v1/webhooks//{HOOK} 404",
                f"POST /api/v1%2Fwebhooks%2F{HOOK} 404",
                f"POST /api/v1/provider-hooks//replicate/{HOOK}.mac 404",
                # A credential outside a URL, encoded or in other case.
                f"value {quote_all(API_KEY)} refused",
                f"value {API_KEY.upper()} refused",
                f"value {quote_all(JWT)} refused",
            ]
        ),
    )
    def test_encoded_and_recased_secrets_are_replaced(self, line: str) -> None:
        scrubbed = logs.redact(line)
        assert "[redacted]" in scrubbed
        _assert_clean(scrubbed)
        _assert_clean(unquote(unquote(unquote(scrubbed))))
        assert API_KEY[4:].upper() not in scrubbed.upper()

    @pytest.mark.parametrize(
        "line",
        [
            "GET /api/v1/workflows?limit=50&cursor=abc HTTP/1.1",
            "PATCH /api/v1/workflows/w1/webhooks/0193e0c4-7b1a-7c2e-9f00-123456789abc",
            "GET /api/v1/artifacts/a1?exp=1700000000",
            "GET /api/v1/workflows?name=caf%C3%A9%20au%20lait&limit=5",
            "GET /api/v1/workflows/w1/webhooks HTTP/1.1 200",
            "run 0193e0c4 finished in 12 ms",
        ],
    )
    def test_lines_without_secrets_are_unchanged(self, line: str) -> None:
        assert logs.redact(line) == line


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger of its own writing to a string through a protected handler."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(logs.FORMAT))
    logger = logging.getLogger("nodeloom.test_redaction")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    logs.protect(logger)
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)


def _assert_clean(text: str) -> None:
    for secret in (JWT, API_KEY, SIG, HOOK):
        assert secret not in text, text
        assert secret[len(secret) // 2 :] not in text, text
    assert JWT.rsplit(".", 1)[1] not in text


class TestFilter:
    def test_arguments_and_message(self, captured: tuple[logging.Logger, io.StringIO]) -> None:
        log, out = captured
        log.info('%s - "WebSocket %s" [accepted]', "127.0.0.1:5", f"/api/v1/ws?token={JWT}")
        log.warning(f"trigger /api/v1/webhooks/{HOOK} refused")
        log.info("%(path)s answered %(status)d", {"path": f"/x?sig={SIG}", "status": 200})
        text = out.getvalue()
        _assert_clean(text)
        assert '"WebSocket /api/v1/ws?token=[redacted]" [accepted]' in text
        assert "/x?sig=[redacted] answered 200" in text

    def test_an_argument_that_is_not_a_string(
        self, captured: tuple[logging.Logger, io.StringIO]
    ) -> None:
        log, out = captured
        log.info("opened %s (%d)", URL(f"http://h/api/v1/ws?token={API_KEY}"), 7)
        _assert_clean(out.getvalue())
        assert "opened http://h/api/v1/ws?token=[redacted] (7)" in out.getvalue()

    def test_traceback(self, captured: tuple[logging.Logger, io.StringIO]) -> None:
        log, out = captured
        try:
            raise ValueError(f"cannot fetch /api/v1/artifacts/a1?{SIGNED} with Bearer {JWT}")
        except ValueError:
            log.exception("unhandled error on POST /api/v1/webhooks/%s", HOOK)
        text = out.getvalue()
        _assert_clean(text)
        assert "Traceback (most recent call last)" in text
        assert "ValueError: cannot fetch /api/v1/artifacts/a1?exp=" in text
        assert "unhandled error on POST /api/v1/webhooks/[redacted]" in text

    def test_records_of_child_loggers_reaching_the_handler(
        self, captured: tuple[logging.Logger, io.StringIO]
    ) -> None:
        _, out = captured
        logging.getLogger("nodeloom.test_redaction.child").error("token=%s", f"?token={JWT}")
        _assert_clean(out.getvalue())
        assert "?token=[redacted]" in out.getvalue()

    def test_uvicorn_access_formatter_still_formats(self) -> None:
        """uvicorn's access formatter unpacks the record's five arguments: they stay five."""
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(
            AccessFormatter(
                '%(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False
            )
        )
        handler.addFilter(logs.RedactSecrets())
        log = logging.getLogger("nodeloom.test_redaction.access")
        log.propagate = False
        log.setLevel(logging.INFO)
        log.addHandler(handler)
        try:
            log.info(
                '%s - "%s %s HTTP/%s" %d',
                "127.0.0.1:5",
                "GET",
                f"/api/v1/workflows/w/runs/r/events?token={JWT}",
                "1.1",
                200,
            )
        finally:
            log.removeHandler(handler)
        line = stream.getvalue()
        _assert_clean(line)
        assert line.strip() == (
            '127.0.0.1:5 - "GET /api/v1/workflows/w/runs/r/events?token=[redacted] HTTP/1.1" 200 OK'
        )

    def test_protect_adds_the_filter_once(self) -> None:
        log = logging.getLogger("nodeloom.test_redaction.once")
        handler = logging.NullHandler()
        log.addHandler(handler)
        try:
            logs.protect(log)
            logs.protect(log)
            assert sum(isinstance(f, logs.RedactSecrets) for f in handler.filters) == 1
        finally:
            log.removeHandler(handler)

    def test_uvicorn_configuration_filters_every_handler(self) -> None:
        config = logs.uvicorn_log_config()
        assert config["filters"]["redact_secrets"]["()"] is logs.RedactSecrets
        assert config["handlers"]
        for handler in config["handlers"].values():
            assert "redact_secrets" in handler["filters"]

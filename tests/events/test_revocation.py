"""Revocation reaches open streams at once: a WebSocket authenticated by a key that is
revoked, by a token whose password changed, or of an account disabled from the command line,
is closed with 4401; an event stream (SSE) ends. Over a real server and real sockets."""

from __future__ import annotations

import asyncio
import os
import time

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests import launcher
from tests.conftest import PASSWORD
from tests.events.conftest import Account, Live, _account, create_workflow, delay_graph, execute

CLOSE_UNAUTHORIZED = 4401


async def _closed_within(ws: object, seconds: float) -> tuple[int | None, float]:
    started = time.monotonic()
    with pytest.raises(ConnectionClosed) as closed:
        async with asyncio.timeout(seconds):
            while True:
                await ws.recv()  # type: ignore[attr-defined]
    return closed.value.rcvd.code if closed.value.rcvd else None, time.monotonic() - started


def _new_account(live: Live, email: str) -> Account:
    with httpx.Client(base_url=live.base_url, timeout=10) as http:
        return _account(http, email)


async def test_revoking_a_key_closes_its_websocket_at_once(live: Live) -> None:
    account = _new_account(live, "revoke-key@example.com")
    async with live.connect(account) as ws, httpx.AsyncClient(base_url=live.base_url) as http:
        await ws.send('{"type": "ping"}')
        assert "pong" in await ws.recv()
        r = await http.delete(
            f"/api/v1/api-keys/{await _key_id(http, account)}",
            headers={"Authorization": f"Bearer {account.jwt}"},
        )
        assert r.status_code == 204
        code, took = await _closed_within(ws, 2)
    assert code == CLOSE_UNAUTHORIZED
    assert took < 0.5


async def _key_id(http: httpx.AsyncClient, account: Account) -> str:
    r = await http.get("/api/v1/api-keys", headers={"Authorization": f"Bearer {account.jwt}"})
    return str(next(k["id"] for k in r.json() if account.api_key.startswith(k["prefix"])))


async def test_a_password_change_closes_streams_of_older_tokens_only(live: Live) -> None:
    account = _new_account(live, "password@example.com")
    ws_url = live.ws_url + f"?token={account.jwt}"
    async with (
        connect(ws_url, open_timeout=5) as old_token,
        live.connect(account) as api_key,
        httpx.AsyncClient(base_url=live.base_url) as http,
    ):
        r = await http.post(
            "/api/v1/me/password",
            json={"current_password": PASSWORD, "new_password": "another long password"},
            headers={"Authorization": f"Bearer {account.jwt}"},
        )
        assert r.status_code == 200, r.text
        fresh = r.json()["access_token"]
        code, took = await _closed_within(old_token, 2)
        assert code == CLOSE_UNAUTHORIZED and took < 0.5
        # The API key is not a password: its socket stays, and so does one of the new token.
        async with connect(live.ws_url + f"?token={fresh}", open_timeout=5) as new_token:
            await asyncio.sleep(1.5)  # past a poll of the revocation feed
            for ws in (api_key, new_token):
                await ws.send('{"type": "ping"}')
                assert "pong" in await ws.recv()
        old = await http.get("/api/v1/me", headers={"Authorization": f"Bearer {account.jwt}"})
        assert old.status_code == 401


async def test_an_account_disabled_from_the_command_line_loses_its_streams(live: Live) -> None:
    account = _new_account(live, "disabled@example.com")
    async with live.http(account) as http:
        wf = await create_workflow(http, delay_graph(15))
        run_id = await execute(http, wf)
    sse = httpx.AsyncClient(base_url=live.base_url, timeout=10)
    async with live.connect(account) as ws, sse:
        url = f"/api/v1/workflows/{wf}/runs/{run_id}/events?token={account.jwt}"
        async with sse.stream("GET", url) as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            assert (await anext(lines)).startswith("id:")
            env = {
                **os.environ,
                "NODELOOM_DATA_DIR": str(live.server.data_dir),
                "NODELOOM_LOG_LEVEL": "WARNING",
            }
            done = await asyncio.to_thread(
                launcher.run,
                ["accounts", "set", "--email", "disabled@example.com", "--disabled"],
                env,
            )
            assert done.returncode == 0, done.stderr
            code, took = await _closed_within(ws, 3)
            assert code == CLOSE_UNAUTHORIZED
            assert took < 2.5  # another process: the revocation feed is read every second
            async with asyncio.timeout(3):
                rest = [line async for line in lines]
            assert not any('"run.completed"' in line for line in rest)  # ended early
    with httpx.Client(base_url=live.base_url) as plain:
        assert plain.get("/api/v1/me", headers=account.headers).status_code == 401
        r = plain.post(
            "/api/v1/auth/login", json={"email": "disabled@example.com", "password": PASSWORD}
        )
        assert r.status_code == 403

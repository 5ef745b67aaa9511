"""No credential reaches the server's log: a real ``nodeloom serve`` (one process, and
``--processes 2``) with its access log on is sent every kind of credential-bearing URL — the
WebSocket and the SSE stream with ``?token=`` (a JWT and an API key), a signed artifact URL
(``?sig=``), a webhook trigger (the token is the path) — and its whole log is searched."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.events.conftest import Account, _account, quick_graph, send
from tests.server import ServerProcess


def quote_all(text: str) -> str:
    """Every character percent-encoded, as a client may send it."""
    return "".join(f"%{b:02X}" for b in text.encode())


@pytest.fixture(params=[1, 2], ids=["one-process", "two-processes"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    processes: int = request.param
    proc = ServerProcess(
        tmp_path / "data",
        env={"NODELOOM_ACCESS_LOG": "true", "NODELOOM_LOG_LEVEL": "INFO"},
        args=["--processes", str(processes)] if processes > 1 else [],
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


async def test_credentials_never_reach_the_log(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        owner: Account = _account(http, "owner@example.com")
    secrets: list[str] = [owner.jwt, owner.api_key]
    ws_url = server.base_url.replace("http://", "ws://") + "/api/v1/ws"

    async with httpx.AsyncClient(
        base_url=server.base_url, headers=owner.headers, timeout=10
    ) as http:
        r = await http.post("/api/v1/workflows", json={"name": "logs", "graph_json": quick_graph()})
        assert r.status_code == 201, r.text
        wf = r.json()["id"]
        r = await http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]

        # The WebSocket, as the web app opens it (a JWT in the query), and with an API key.
        for credential in (owner.jwt, owner.api_key):
            async with connect(f"{ws_url}?token={credential}", open_timeout=5) as ws:
                await send(ws, {"type": "subscribe", "run_id": run_id})
                assert '"subscribed"' in str(await ws.recv())
            # Percent-encoded, the parameter is the same one to the server (it decodes the
            # query): it authenticates, so it must be scrubbed as the server reads it.
            query = f"%74oken={quote_all(credential)}"
            async with connect(f"{ws_url}?{query}", open_timeout=5) as ws:
                await send(ws, {"type": "subscribe", "run_id": run_id})
                assert '"subscribed"' in str(await ws.recv())

        # The SSE stream (EventSource cannot set headers): it ends with the finished run.
        anonymous = httpx.AsyncClient(base_url=server.base_url, timeout=10)
        async with anonymous:
            for credential in (owner.jwt, owner.api_key):
                r = await anonymous.get(
                    f"/api/v1/workflows/{wf}/runs/{run_id}/events", params={"token": credential}
                )
                assert r.status_code == 200, r.text
                assert "run.completed" in r.text

            # A signed artifact URL.
            run = (await http.get(f"/api/v1/workflows/{wf}/runs/{run_id}")).json()
            artifact_id = next(n for n in run["node_runs"] if n["node_id"] == "tpl")["artifact_id"]
            meta = (await http.get(f"/api/v1/artifacts/{artifact_id}/metadata")).json()
            download = httpx.URL(meta["download_url"])
            sig = download.params["sig"]
            secrets.append(sig)
            r = await anonymous.get(meta["download_url"])
            assert r.status_code == 200 and r.text == "hi!"
            encoded = str(download.copy_with(params=None)) + f"?exp={download.params['exp']}"
            r = await anonymous.get(encoded + f"&%73ig={quote_all(sig)}")
            assert r.status_code == 200 and r.text == "hi!"

            # A webhook trigger, and one with a token cut short (still most of a secret).
            r = await http.post(f"/api/v1/workflows/{wf}/webhooks", json={"name": "hook"})
            assert r.status_code == 201, r.text
            token = r.json()["token"]
            secrets.append(token)
            r = await anonymous.post(r.json()["url"], json={"text": "x"})
            assert r.status_code == 202, r.text
            r = await anonymous.post(f"/api/v1/webhooks/{token[:-1]}", json={})
            assert r.status_code == 404
            # Paths beside the trigger route (the web app's, a 404, a 405) are logged as sent.
            for path in (
                f"//webhooks/{token}",
                f"/api/v1//webhooks/{token}",
                f"/api/v1/webhooks/{token}",
                f"/api/v1/Webhooks/{token}",
            ):
                r = await anonymous.get(
                    httpx.URL(server.base_url).copy_with(raw_path=path.encode())
                )
                assert r.status_code < 500, (path, r.status_code)

    server.stop()  # every process has written and closed its log
    log = server.log_path.read_text(errors="replace")
    # The lines that used to carry them are there, scrubbed: the test would see a leak.
    assert "WebSocket /api/v1/ws?token=[redacted]" in log, log[-3000:]
    assert f"/api/v1/workflows/{wf}/runs/{run_id}/events?token=[redacted]" in log, log[-3000:]
    assert f"/api/v1/artifacts/{artifact_id}?exp=" in log and "sig=[redacted]" in log
    assert "POST /api/v1/webhooks/[redacted]" in log, log[-3000:]
    assert "GET //webhooks/[redacted]" in log, log[-3000:]
    lowered = log.lower()
    for secret in secrets:
        assert secret not in log
        assert quote_all(secret).lower() not in lowered
        assert secret[len(secret) // 2 :] not in log
    assert token[:-1] not in log
    assert sig[:16] not in log
    # The JWT's signature, the part that makes it a credential, is nowhere either.
    assert owner.jwt.rsplit(".", 1)[1] not in log

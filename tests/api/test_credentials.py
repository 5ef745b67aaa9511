"""Provider credentials: the API (never a secret in an answer, another account's is 404,
validation per kind), and provider nodes that name one: they reach the credential's endpoint
with its key (rotation applies to the next run), through the SSRF guard, cached per
credential, reported at save, GET and execute when the credential is gone. No operator
provider is configured here: a node with a credential does not need one."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeloom.schemas.credentials import HINT_MIN_LENGTH, hint
from tests.api.test_auth import assert_problem
from tests.conftest import User
from tests.fakes import FakeServer, Recorded, serve
from tests.nodes.conftest import provider as provider  # the fixture
from tests.runs_helpers import create_workflow, e, execute, g, n, wait_for_run

SECRET = "sk-nodeloomcred-9f8e7d6c5b4a3210"
ROTATED = "sk-rotatedcred-0a1b2c3d4e5f6789"
REFUSED = "sk-refusedcred-77665544332211ff"  # the fake provider refuses (and quotes) it


def echoed(key: str) -> str:
    """How the fake quotes a refused key: as it is, or as providers also do — without its
    last characters, upper-cased, or JSON-escaped inside the message — as the key says."""
    if "-cut-" in key:
        return key[:-4] + "****"
    if "-upper-" in key:
        return key.upper()
    if "-json-" in key:
        return "".join(f"\\u{ord(c):04x}" for c in key)
    return key


@pytest.fixture
def openai() -> Iterator[FakeServer]:
    """An OpenAI-compatible fake that records every request (with its Authorization), answers
    GET /v1/models and POST /v1/chat/completions, and refuses a key containing "refused" with
    401, quoting the key as OpenAI does."""
    server: FakeServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _refused(self) -> bool:
            key = self.headers.get("Authorization", "").removeprefix("Bearer ")
            if "refused" in key:
                message = f"Incorrect API key provided: {echoed(key)}."
                self._send(401, {"error": {"message": message}})
                return True
            return False

        def do_GET(self) -> None:
            server.requests.append(Recorded("GET", self.path, dict(self.headers), b""))
            if self._refused():
                return
            if self.path == "/v1/models":
                self._send(200, {"data": [{"id": "fake-model"}]})
            else:
                self._send(404, {"error": {"message": "no such endpoint"}})

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            server.requests.append(Recorded("POST", self.path, dict(self.headers), body))
            if self._refused():
                return
            prompt = json.loads(body)["messages"][-1]["content"]
            answer = {"choices": [{"message": {"role": "assistant", "content": f"echo: {prompt}"}}]}
            self._send(200, answer)

    server = serve(Handler)
    try:
        yield server
    finally:
        server.stop()


def auths(server: FakeServer) -> list[str]:
    return [q.headers.get("Authorization", "") for q in server.requests]


async def create(
    client: httpx.AsyncClient, user: User, fields: dict[str, Any], kind: str = "openai"
) -> dict[str, Any]:
    r = await client.post(
        "/api/v1/credentials",
        json={"name": f"{kind} key", "kind": kind, "fields": fields},
        headers=user.headers,
    )
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def llm_graph(credential: str, text: str = "hello") -> dict[str, Any]:
    return g(
        [n("in", "TextInput", text=text), n("llm", "LLMText", credential=credential)],
        [e("in", "llm")],
    )


async def run(
    client: httpx.AsyncClient, user: User, workflow_id: str, cache: bool = True
) -> dict[str, Any]:
    r = await execute(client, user, workflow_id, {"cache": cache})
    assert r.status_code == 202, r.text
    return await wait_for_run(client, user, workflow_id, r.json()["run_id"])


def llm(run_body: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = next(x for x in run_body["node_runs"] if x["node_id"] == "llm")
    return node


@given(st.text(max_size=64))
def test_a_hint_shows_at_most_a_prefix_and_four_characters(secret: str) -> None:
    shown = hint({"api_key": secret})
    if len(secret) < HINT_MIN_LENGTH:
        assert shown == "…"
        return
    prefix, tail = shown.split("…")
    assert tail == secret[-4:]
    assert prefix == "" or (secret.startswith(prefix) and prefix.endswith("-") and len(prefix) <= 5)


OUT_KEYS = {"id", "name", "kind", "hint", "fields", "created_at", "updated_at", "last_used_at"}


class TestCredentialsApi:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def test_lifecycle_never_shows_the_secret(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        first = await create(
            client, owner, {"base_url": "https://api.example.com/v1/", "api_key": SECRET}
        )
        assert set(first) == OUT_KEYS
        assert first["hint"] == "sk-…3210"
        assert first["fields"] == {"base_url": "https://api.example.com/v1"}
        assert first["last_used_at"] is None
        second = await create(
            client, owner, {"token": "a-bearer-token-of-some-length"}, "http_bearer"
        )
        assert second["fields"] == {} and second["hint"] == "…ngth"

        r = await client.get("/api/v1/credentials?limit=1", headers=owner.headers)
        assert r.status_code == 200
        assert [c["id"] for c in r.json()] == [second["id"]]  # newest first
        assert 'rel="next"' in r.headers["link"]
        next_url = r.headers["link"].split(">")[0].lstrip("<")
        r = await client.get(next_url, headers=owner.headers)
        assert [c["id"] for c in r.json()] == [first["id"]] and "link" not in r.headers

        r = await client.get(f"/api/v1/credentials/{first['id']}", headers=owner.headers)
        assert r.json() == first

        r = await client.patch(
            f"/api/v1/credentials/{first['id']}", json={"name": "renamed"}, headers=owner.headers
        )
        assert r.status_code == 200 and r.json()["name"] == "renamed"
        assert r.json()["hint"] == first["hint"]
        r = await client.patch(
            f"/api/v1/credentials/{first['id']}",
            json={"fields": {"api_key": ROTATED}},
            headers=owner.headers,
        )
        assert r.status_code == 200, r.text
        assert r.json()["hint"] == "sk-…6789"
        assert r.json()["fields"] == first["fields"]  # the base_url is kept
        r = await client.patch(
            f"/api/v1/credentials/{first['id']}",
            json={"fields": {"base_url": "ftp://nope"}},
            headers=owner.headers,
        )
        problem = assert_problem(r, 400, "invalid_request")
        assert problem["errors"][0]["pointer"] == "/fields/base_url"

        r = await client.delete(f"/api/v1/credentials/{first['id']}", headers=owner.headers)
        assert r.status_code == 204
        for method in ("GET", "PATCH", "DELETE"):
            r = await client.request(
                method, f"/api/v1/credentials/{first['id']}", json={}, headers=owner.headers
            )
            assert_problem(r, 404, "not_found")
        listed = await client.get("/api/v1/credentials", headers=owner.headers)
        assert [c["id"] for c in listed.json()] == [second["id"]]
        for text in (r.text, listed.text):
            assert SECRET not in text and ROTATED not in text

    async def test_a_short_secret_shows_nothing(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        made = await create(client, owner, {"base_url": "http://127.0.0.1:1", "api_key": "ollama"})
        assert made["hint"] == "…"

    async def test_another_accounts_credential_is_not_there(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        mine = await create(
            client, owner, {"base_url": "https://api.example.com", "api_key": SECRET}
        )
        url = f"/api/v1/credentials/{mine['id']}"
        for method, path in (
            ("GET", url),
            ("PATCH", url),
            ("DELETE", url),
            ("POST", f"{url}/test"),
        ):
            r = await client.request(method, path, json={"name": "x"}, headers=other.headers)
            assert_problem(r, 404, "not_found")
        r = await client.get("/api/v1/credentials", headers=other.headers)
        assert r.json() == []
        # Nor can another account's workflow name it.
        r = await client.post(
            "/api/v1/workflows",
            json={"name": "w", "graph_json": llm_graph(mine["id"])},
            headers=other.headers,
        )
        problem = assert_problem(r, 400, "invalid_graph")
        assert problem["errors"] == [
            {
                "pointer": "/graph_json/nodes/1/data/credential",
                "message": f"no credential {mine['id']} in this account",
            }
        ]
        r = await client.get(url, headers=owner.headers)
        assert r.status_code == 200 and r.json()["name"] == mine["name"]

    async def test_needs_authentication(self, client: httpx.AsyncClient) -> None:
        assert_problem(await client.get("/api/v1/credentials"), 401, "unauthorized")

    @pytest.mark.parametrize(
        ("kind", "fields", "pointer"),
        [
            ("azure", {"api_key": SECRET}, "/kind"),
            ("openai", {"base_url": "https://x.example"}, "/fields/api_key"),
            ("openai", {"base_url": "file:///etc/passwd", "api_key": SECRET}, "/fields/base_url"),
            ("openai", {"base_url": "http://u:p@x.example", "api_key": SECRET}, "/fields/base_url"),
            ("openai", {"base_url": "https://x.example", "api_key": ""}, "/fields/api_key"),
            ("replicate", {"api_token": SECRET, "extra": 1}, "/fields/extra"),
            ("fal", {}, "/fields/api_key"),
            ("comfyui", {"base_url": "http://gpu.example", "username": "u"}, "/fields"),
            (
                "comfyui",
                {
                    "base_url": "http://gpu.example",
                    "bearer_token": SECRET,
                    "username": "u",
                    "password": "p",
                },
                "/fields",
            ),
            ("elevenlabs", {"api_key": 5}, "/fields/api_key"),
            ("http_bearer", {"token": None}, "/fields/token"),
            (
                "http_header",
                {"header_name": "Bad Header", "header_value": SECRET},
                "/fields/header_name",
            ),
        ],
    )
    async def test_fields_are_checked_per_kind(
        self,
        client: httpx.AsyncClient,
        owner: User,
        kind: str,
        fields: dict[str, Any],
        pointer: str,
    ) -> None:
        r = await client.post(
            "/api/v1/credentials",
            json={"name": "k", "kind": kind, "fields": fields},
            headers=owner.headers,
        )
        problem = assert_problem(r, 400, "invalid_request")
        assert pointer in [p["pointer"] for p in problem["errors"]], problem
        assert SECRET not in r.text

    @pytest.mark.parametrize(
        ("kind", "fields", "public"),
        [  # replicate and fal have connection tests: tests/providers/test_hosted.py
            (
                "comfyui",
                {"base_url": "http://127.0.0.1:9"},
                {"base_url": "http://127.0.0.1:9"},
            ),
            (
                "comfyui",
                {"base_url": "http://127.0.0.1", "username": "ann", "password": SECRET},
                {"base_url": "http://127.0.0.1", "username": "ann"},
            ),
            (
                "http_header",
                {"header_name": "X-Api-Key", "header_value": SECRET},
                {"header_name": "X-Api-Key"},
            ),
        ],
    )
    async def test_each_kind_keeps_only_its_public_fields_visible(
        self,
        client: httpx.AsyncClient,
        owner: User,
        kind: str,
        fields: dict[str, Any],
        public: dict[str, Any],
    ) -> None:
        made = await create(client, owner, fields, kind)
        assert made["kind"] == kind and made["fields"] == public
        r = await client.post(f"/api/v1/credentials/{made['id']}/test", headers=owner.headers)
        assert r.status_code == 200
        if kind == "comfyui":  # tested, and refused by the address check (loopback)
            assert r.json()["ok"] is False and r.json()["status"] is None
            assert r.json()["message"].startswith("refusing to connect to 127.0.0.1")
            return
        assert r.json() == {
            "ok": False,
            "status": None,
            "message": "no connection test for this kind yet",
        }

    async def test_invalid_bodies(self, client: httpx.AsyncClient, owner: User) -> None:
        for body in ({"name": "x", "kind": "openai"}, {"name": "x", "kind": "fal", "fields": [1]}):
            r = await client.post("/api/v1/credentials", json=body, headers=owner.headers)
            problem = assert_problem(r, 400, "invalid_request")
            assert problem["errors"][0]["pointer"] == "/fields"
        r = await client.get("/api/v1/credentials?cursor=garbage", headers=owner.headers)
        assert_problem(r, 400, "invalid_request")


class TestCredentialRuns:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {"http_allowlist": ["127.0.0.1", "localhost"], "rate_limit_api_key": 10_000}

    async def test_rotation_reaches_the_next_run_and_keeps_the_cache(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer
    ) -> None:
        cred = await create(client, owner, {"base_url": openai.url + "/v1", "api_key": SECRET})
        r = await client.post(
            "/api/v1/workflows",
            json={"name": "w", "graph_json": llm_graph(cred["id"])},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        assert r.json()["warnings"] == []  # no operator provider, yet available
        wf = r.json()["id"]
        first = await run(client, owner, wf)
        assert first["status"] == "completed", first
        assert auths(openai) == [f"Bearer {SECRET}"]
        used = await client.get(f"/api/v1/credentials/{cred['id']}", headers=owner.headers)
        assert used.json()["last_used_at"] is not None

        r = await client.patch(
            f"/api/v1/credentials/{cred['id']}",
            json={"fields": {"api_key": ROTATED}},
            headers=owner.headers,
        )
        assert r.status_code == 200
        # Rotation keeps the cache key: the answer is reused, nobody is called.
        assert llm(await run(client, owner, wf))["cached"]
        assert len(openai.requests) == 1
        fresh = await run(client, owner, wf, cache=False)
        assert fresh["status"] == "completed" and not llm(fresh)["cached"]
        assert auths(openai) == [f"Bearer {SECRET}", f"Bearer {ROTATED}"]

        # A new endpoint is a new cache key.
        r = await client.patch(
            f"/api/v1/credentials/{cred['id']}",
            json={"fields": {"base_url": f"http://localhost:{openai.port}/v1"}},
            headers=owner.headers,
        )
        assert r.status_code == 200, r.text
        moved = await run(client, owner, wf)
        assert moved["status"] == "completed", moved
        assert not llm(moved)["cached"]
        assert len(openai.requests) == 3

    async def test_image_and_speech_nodes_use_it_too(
        self, client: httpx.AsyncClient, owner: User, provider: FakeServer
    ) -> None:
        cred = await create(client, owner, {"base_url": provider.url + "/v1", "api_key": SECRET})
        graph = g(
            [
                n("in", "TextInput", text="a red fox"),
                n("img", "TextToImage", size="40x30", credential=cred["id"]),
                n("tts", "TextToSpeech", credential=cred["id"]),
                n("local", "TextToSpeech"),  # no credential, no operator provider: eSpeak
            ],
            [e("in", "img"), e("in", "tts"), e("in", "local")],
        )
        wf = await create_workflow(client, owner, graph)
        done = await run(client, owner, wf)
        assert done["status"] == "completed", done
        assert sorted(q.path for q in provider.requests) == [
            "/v1/audio/speech",
            "/v1/images/generations",
        ]
        assert auths(provider) == [f"Bearer {SECRET}"] * 2

    async def test_each_account_pays_for_its_own_answer(
        self, client: httpx.AsyncClient, owner: User, other: User, openai: FakeServer
    ) -> None:
        flows = []
        for user, key in ((owner, SECRET), (other, ROTATED)):
            cred = await create(client, user, {"base_url": openai.url + "/v1", "api_key": key})
            flows.append((user, await create_workflow(client, user, llm_graph(cred["id"]))))
        for user, wf in flows:
            assert not llm(await run(client, user, wf))["cached"]
        for user, wf in flows:
            assert llm(await run(client, user, wf))["cached"]
        assert sorted(auths(openai)) == sorted([f"Bearer {SECRET}", f"Bearer {ROTATED}"])

    async def test_a_credential_deleted_after_a_run_is_refused_at_the_next_execute(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer, app: Any, backend: str
    ) -> None:
        """The process knows the workflow's graph from the first run: the next execute reads
        the workflow's version, the key's earlier answer and the credential's kind in one
        statement, and the credential must still be there."""
        cred = await create(client, owner, {"base_url": openai.url + "/v1", "api_key": SECRET})
        wf = await create_workflow(client, owner, llm_graph(cred["id"]))
        assert llm(await run(client, owner, wf))["status"] == "completed"
        key = {"Idempotency-Key": uuid.uuid4().hex}
        with app.state.ctx.db.counting() as sent:
            r = await client.post(
                f"/api/v1/workflows/{wf}/execute",
                json={"cache": False},
                headers={**owner.headers, **key},
            )
        assert r.status_code == 202, r.text
        if backend == "postgres":  # its API key, the look-ahead, the acceptance
            assert sent.n == 3
        again = await client.post(
            f"/api/v1/workflows/{wf}/execute",
            json={"cache": False},
            headers={**owner.headers, **key},
        )
        assert again.json()["run_id"] == r.json()["run_id"]
        assert again.headers["Idempotent-Replayed"] == "true"
        await wait_for_run(client, owner, wf, r.json()["run_id"])

        r = await client.delete(f"/api/v1/credentials/{cred['id']}", headers=owner.headers)
        assert r.status_code == 204
        r = await execute(client, owner, wf, {"cache": False})
        problem = assert_problem(r, 400, "invalid_graph")
        assert problem["errors"] == [
            {
                "pointer": "/graph_json/nodes/1/data/credential",
                "message": f"no credential {cred['id']} in this account",
            }
        ]
        # The key's earlier answer still comes first: the same request replays its run.
        replay = await client.post(
            f"/api/v1/workflows/{wf}/execute",
            json={"cache": False},
            headers={**owner.headers, **key},
        )
        assert replay.status_code == 202 and replay.json()["run_id"] == again.json()["run_id"]

    async def test_a_workflow_saved_or_deleted_after_a_run_is_read_again(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer
    ) -> None:
        first = await create(client, owner, {"base_url": openai.url + "/v1", "api_key": SECRET})
        second = await create(client, owner, {"base_url": openai.url + "/v1", "api_key": ROTATED})
        wf = await create_workflow(client, owner, llm_graph(first["id"], text="first"))
        assert llm(await run(client, owner, wf))["status"] == "completed"
        r = await client.patch(
            f"/api/v1/workflows/{wf}",
            json={"graph_json": llm_graph(second["id"], text="second")},
            headers=owner.headers,
        )
        assert r.status_code == 200, r.text
        assert (await run(client, owner, wf, cache=False))["status"] == "completed"
        last = openai.requests[-1]
        assert json.loads(last.body)["messages"][-1]["content"] == "second"
        assert last.headers["Authorization"] == f"Bearer {ROTATED}"
        r = await client.delete(f"/api/v1/workflows/{wf}", headers=owner.headers)
        assert r.status_code == 204
        assert_problem(await execute(client, owner, wf, {"cache": False}), 404, "not_found")

    async def test_a_deleted_credential_is_a_warning_then_refused_at_execute(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer
    ) -> None:
        cred = await create(client, owner, {"base_url": openai.url + "/v1", "api_key": SECRET})
        wf = await create_workflow(client, owner, llm_graph(cred["id"]))
        r = await client.delete(f"/api/v1/credentials/{cred['id']}", headers=owner.headers)
        assert r.status_code == 204
        expected = {
            "pointer": "/graph_json/nodes/1/data/credential",
            "message": f"no credential {cred['id']} in this account",
        }
        got = await client.get(f"/api/v1/workflows/{wf}", headers=owner.headers)
        assert got.status_code == 200 and got.json()["warnings"] == [expected]
        r = await client.post(f"/api/v1/workflows/{wf}/execute", headers=owner.headers)
        problem = assert_problem(r, 400, "invalid_graph")
        assert problem["errors"] == [expected]
        hook = await client.post(
            f"/api/v1/workflows/{wf}/webhooks", json={"name": "h"}, headers=owner.headers
        )
        if hook.status_code == 201:  # webhooks need a plan that has them
            r = await client.post(f"/api/v1/webhooks/{hook.json()['token']}", json={})
            assert_problem(r, 400, "invalid_graph")
        runs = await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)
        assert runs.json() == []
        # Saving the graph again as it is: refused, with the same pointer.
        r = await client.patch(
            f"/api/v1/workflows/{wf}",
            json={"graph_json": llm_graph(cred["id"])},
            headers=owner.headers,
        )
        assert assert_problem(r, 400, "invalid_graph")["errors"] == [expected]
        assert openai.requests == []

    async def test_only_an_openai_credential_fits_a_provider_node(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        cred = await create(client, owner, {"api_token": SECRET}, "replicate")
        graph = g(
            [
                n("in", "TextInput", text="hi"),
                n("llm", "LLMText", credential=cred["id"]),
                n("img", "TextToImage", credential="nope"),
            ],
            [e("in", "llm"), e("in", "img")],
        )
        r = await client.post(
            "/api/v1/workflows", json={"name": "w", "graph_json": graph}, headers=owner.headers
        )
        problem = assert_problem(r, 400, "invalid_graph")
        assert problem["errors"] == [
            {
                "pointer": "/graph_json/nodes/1/data/credential",
                "message": f"credential {cred['id']} is a replicate credential; this node "
                "takes an openai one",
            },
            {
                "pointer": "/graph_json/nodes/2/data/credential",
                "message": "no credential nope in this account",
            },
        ]

    async def test_connection_test(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer
    ) -> None:
        good = await create(client, owner, {"base_url": openai.url + "/v1", "api_key": SECRET})
        r = await client.post(f"/api/v1/credentials/{good['id']}/test", headers=owner.headers)
        assert r.status_code == 200
        assert r.json()["ok"] is True and r.json()["status"] == 200
        assert openai.requests[-1].path == "/v1/models"
        assert openai.requests[-1].headers["Authorization"] == f"Bearer {SECRET}"

        bad = await create(client, owner, {"base_url": openai.url + "/v1", "api_key": REFUSED})
        r = await client.post(f"/api/v1/credentials/{bad['id']}/test", headers=owner.headers)
        body = r.json()
        assert body["ok"] is False and body["status"] == 401
        assert "Incorrect API key provided" in body["message"]
        assert REFUSED not in r.text


@pytest.fixture
def redirecting() -> Iterator[FakeServer]:
    """A server that answers every GET with a redirect (the status is the first path
    segment, ``/302/...``) to a login page, as a proxy or a wrong base URL does: with a JSON
    body, so only the status tells it from an answer."""
    server: FakeServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            server.requests.append(Recorded("GET", self.path, dict(self.headers), b""))
            data = json.dumps({"detail": "see the login page"}).encode()
            self.send_response(int(self.path.split("/")[1]))
            self.send_header("Location", "https://login.example.com/")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = serve(Handler)
    try:
        yield server
    finally:
        server.stop()


class TestConnectionTestAnswers:
    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {"http_allowlist": ["127.0.0.1"], "rate_limit_api_key": 10_000}

    @pytest.mark.parametrize("code", [302, 307])
    async def test_a_redirect_is_no_success(
        self, client: httpx.AsyncClient, owner: User, redirecting: FakeServer, app: Any, code: int
    ) -> None:
        base = f"{redirecting.url}/{code}"
        settings = app.state.ctx.settings
        settings.replicate_api_url = base
        settings.fal_api_url = base
        kinds = {
            "openai": {"base_url": base, "api_key": SECRET},
            "elevenlabs": {"base_url": base, "api_key": SECRET},
            "comfyui": {"base_url": base},
            "replicate": {"api_token": SECRET},
            "fal": {"api_key": SECRET},
        }
        for kind, fields in kinds.items():
            made = await create(client, owner, fields, kind)
            r = await client.post(f"/api/v1/credentials/{made['id']}/test", headers=owner.headers)
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["ok"] is False and body["status"] == code, (kind, body)
            assert f"HTTP {code}" in body["message"] and SECRET not in r.text, (kind, body)
        assert len(redirecting.requests) == len(kinds)  # nothing followed

    async def test_the_kind_cannot_be_changed(self, client: httpx.AsyncClient, owner: User) -> None:
        made = await create(
            client, owner, {"base_url": "https://api.example.com", "api_key": SECRET}
        )
        url = f"/api/v1/credentials/{made['id']}"
        for body in ({"kind": "replicate"}, {"kind": "replicate", "name": "x"}):
            r = await client.patch(url, json=body, headers=owner.headers)
            problem = assert_problem(r, 400, "invalid_request")
            assert problem["errors"][0]["pointer"] == "/kind"
        # Nothing changed; sending the kind it already has is no change at all.
        r = await client.patch(url, json={"kind": "openai", "name": "y"}, headers=owner.headers)
        assert r.status_code == 200, r.text
        assert r.json()["kind"] == "openai" and r.json()["name"] == "y"


class TestWithoutAllowList:
    """The credential's address is the tenant's choice: a private one is refused."""

    async def test_a_private_base_url_is_refused(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer
    ) -> None:
        cred = await create(client, owner, {"base_url": openai.url + "/v1", "api_key": SECRET})
        wf = await create_workflow(client, owner, llm_graph(cred["id"]))
        done = await run(client, owner, wf)
        assert done["status"] == "failed"
        node = llm(done)
        assert node["status"] == "failed" and node["error"]["code"] == "address_refused", node
        r = await client.post(f"/api/v1/credentials/{cred['id']}/test", headers=owner.headers)
        assert r.json()["ok"] is False and "refusing to connect" in r.json()["message"]
        # ... and says the setting that allows it, as the operator would write it.
        assert "NODELOOM_HTTP_ALLOWLIST='[\"127.0.0.1\"]'" in r.json()["message"]
        assert "NODELOOM_HTTP_ALLOWLIST" in node["error"]["message"]
        assert openai.requests == []


class TestSecretsStayHidden:
    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {"http_allowlist": ["127.0.0.1"], "rate_limit_api_key": 10_000}

    async def test_not_in_the_data_directory_the_log_or_any_answer(
        self,
        client: httpx.AsyncClient,
        owner: User,
        openai: FakeServer,
        tmp_path: Path,
        caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str],
    ) -> None:
        caplog.set_level(logging.DEBUG)
        answers: list[str] = []
        cred = await create(client, owner, {"base_url": openai.url + "/v1", "api_key": SECRET})
        wf = await create_workflow(client, owner, llm_graph(cred["id"]))
        ok = await run(client, owner, wf)
        assert ok["status"] == "completed"
        r = await client.patch(
            f"/api/v1/credentials/{cred['id']}",
            json={"fields": {"api_key": REFUSED}},
            headers=owner.headers,
        )
        answers.append(r.text)
        refused = await run(client, owner, wf, cache=False)
        assert refused["status"] == "failed"
        error = llm(refused)["error"]
        assert error["code"] == "provider_error"
        assert "Incorrect API key provided: ***" in error["message"]
        assert auths(openai) == [f"Bearer {SECRET}", f"Bearer {REFUSED}"]
        answers.append(json.dumps([ok, refused]))
        for path in (
            f"/api/v1/workflows/{wf}",
            f"/api/v1/workflows/{wf}/runs",
            "/api/v1/runs",
            f"/api/v1/workflows/{wf}/runs/{refused['id']}/events",
            "/api/v1/credentials",
        ):
            answers.append((await client.get(path, headers=owner.headers)).text)

        captured = capfd.readouterr()
        logs = caplog.text + captured.out + captured.err
        files = [p for p in tmp_path.rglob("*") if p.is_file()]
        assert any(p.name.startswith("nodeloom.db") for p in files)
        for secret in (SECRET, REFUSED):
            assert secret not in logs
            assert all(secret not in text for text in answers)
            for path in files:
                assert secret.encode() not in path.read_bytes(), path

    @pytest.mark.parametrize(
        "refused",
        [
            "sk-refused-cut-5a4b3c2d1e0f9a8b7c6d",
            "sk-refused-upper-5a4b3c2d1e0f9a8b7c6d",
            "sk-refused-json-5a4b3c2d1e0f9a8b7c6d",
        ],
    )
    async def test_a_key_quoted_in_another_form_is_masked_everywhere(
        self,
        client: httpx.AsyncClient,
        owner: User,
        openai: FakeServer,
        tmp_path: Path,
        refused: str,
    ) -> None:
        cred = await create(client, owner, {"base_url": openai.url + "/v1", "api_key": refused})
        wf = await create_workflow(client, owner, llm_graph(cred["id"]))
        failed = await run(client, owner, wf, cache=False)
        assert failed["status"] == "failed"
        error = llm(failed)["error"]
        assert error["code"] == "provider_error"
        assert "Incorrect API key provided: ***" in error["message"], error
        answers = [json.dumps(failed)]
        for path in (
            f"/api/v1/workflows/{wf}/runs",
            f"/api/v1/workflows/{wf}/runs/{failed['id']}/events",
        ):
            answers.append((await client.get(path, headers=owner.headers)).text)
        stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
        tail = refused[-16:]  # the random part, in every form the fake may quote it
        forms = [tail, tail.upper(), "".join(f"\\u{ord(c):04x}" for c in tail)]
        for form in forms:
            assert all(form not in text for text in answers), form
            assert form.encode() not in stored, form

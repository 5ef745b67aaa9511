"""Replicate and fal nodes end to end, through the app over HTTP, against fakes of each
provider's published API on 127.0.0.1: bindings sent as data URIs, slow jobs followed to the
end, 429/5xx retried, the provider's failure quoted and not charged, output URLs at private
addresses and oversized outputs refused, a cancelled run cancels the job at the provider, and
the video/music families choose their provider by the credential's kind. On SQLite and
PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import httpx
import pytest

from tests.conftest import User
from tests.providers.fakes import FAL_KEY, REPLICATE_TOKEN, FakeFal, FakeReplicate
from tests.runs_helpers import balance, create_workflow, e, execute, g, n, wait_for_run


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides(replicate_fake: FakeReplicate, fal_fake: FakeFal) -> dict[str, object]:
    return {
        "http_allowlist": ["127.0.0.1/32"],  # the fakes; 127.0.0.2 stays refused
        "replicate_api_url": replicate_fake.url + "/v1",
        "fal_queue_url": fal_fake.url,
        "fal_api_url": fal_fake.url + "/v1",
        "provider_download_max_bytes": 200_000,
        "provider_max_retries": 3,
    }


async def credential(client: httpx.AsyncClient, user: User, kind: str) -> str:
    fields = {"api_token": REPLICATE_TOKEN} if kind == "replicate" else {"api_key": FAL_KEY}
    r = await client.post(
        "/api/v1/credentials",
        json={"name": kind, "kind": kind, "fields": fields},
        headers=user.headers,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def run_graph(
    client: httpx.AsyncClient, user: User, graph: dict[str, Any], timeout: float = 30
) -> dict[str, Any]:
    wf = await create_workflow(client, user, graph)
    r = await execute(client, user, wf, {"cache": False})
    assert r.status_code == 202, r.text
    return await wait_for_run(client, user, wf, r.json()["run_id"], timeout=timeout)


def node_of(run: dict[str, Any], node_id: str) -> dict[str, Any]:
    found: dict[str, Any] = next(x for x in run["node_runs"] if x["node_id"] == node_id)
    return found


async def artifact(client: httpx.AsyncClient, user: User, artifact_id: str) -> httpx.Response:
    r = await client.get(f"/api/v1/artifacts/{artifact_id}", headers=user.headers)
    assert r.status_code == 200, r.text
    return r


def image_graph(cred: str, **data: Any) -> dict[str, Any]:
    params = {
        "credential": cred,
        "model": "black-forest-labs/flux-schnell",
        "input": {"num_outputs": 1},
        "bindings": {"prompt": "text", "image": "image"},
        **data,
    }
    return g(
        [
            n("in", "TextInput", text="a red fox"),
            n("pic", "GradientBackground", width=8, height=8),
            n("gen", data.pop("type", "ReplicateModel"), **params),
        ],
        [e("in", "gen", "text"), e("pic", "gen", "image")],
    )


class TestReplicate:
    async def test_a_model_runs_with_bound_inputs(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        replicate_fake.script.seconds = 1.2  # a few polls
        cred = await credential(client, owner, "replicate")
        before = await balance(client, owner)
        run = await run_graph(client, owner, image_graph(cred))
        assert run["status"] == "completed", run
        gen = node_of(run, "gen")
        assert gen["credits_used"] == 10
        assert before - await balance(client, owner) == run["credits_used"]
        body = await artifact(client, owner, gen["artifact_id"])
        assert body.headers["content-type"] == "image/png"
        assert body.content == replicate_fake.files["image"][1]
        # What was sent: the official model's endpoint, the text, the image as a data URI.
        assert replicate_fake.submissions == 1
        _method, path, headers, sent = next(r for r in replicate_fake.requests if r[0] == "POST")
        assert path == "/v1/models/black-forest-labs/flux-schnell/predictions"
        assert headers["Authorization"] == f"Bearer {REPLICATE_TOKEN}"
        assert "Prefer" not in headers
        assert sent["input"]["prompt"] == "a red fox"
        assert sent["input"]["num_outputs"] == 1
        prefix = "data:image/png;base64,"
        assert sent["input"]["image"].startswith(prefix)
        assert base64.b64decode(sent["input"]["image"][len(prefix) :])[:4] == b"\x89PNG"
        polls = [r for r in replicate_fake.requests if r[0] == "GET" and "/predictions/" in r[1]]
        assert len(polls) >= 2

    async def test_runs_one_after_another_share_one_kept_alive_connection(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        """The server keeps its connections to a provider's API between node runs: a
        second run's create call and polls go over the connection the first run opened (no
        new TCP or TLS handshake per generation)."""
        replicate_fake.script.seconds = 0.6  # one poll or two per run
        cred = await credential(client, owner, "replicate")
        for _ in range(2):
            run = await run_graph(client, owner, image_graph(cred))
            assert run["status"] == "completed", run
        model_calls = [
            port
            for (method, path, _h, _b), port in zip(
                replicate_fake.requests, replicate_fake.peers, strict=True
            )
            if "/predictions" in path and method in ("GET", "POST")
        ]
        assert len(model_calls) >= 4  # two creates, a poll each at least
        assert len(set(model_calls)) == 1, model_calls

    @pytest.mark.parametrize("shape", ["string", "object", "data"])
    async def test_every_shape_of_file_output_gives_the_file(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate, shape: str
    ) -> None:
        """Models answer one URL, a list of them, named outputs, or (with Prefer: wait) the
        file itself as a data: URI: each gives the node the model's file."""
        replicate_fake.script.output_shape = shape
        cred = await credential(client, owner, "replicate")
        run = await run_graph(client, owner, image_graph(cred))
        assert run["status"] == "completed", run
        body = await artifact(client, owner, node_of(run, "gen")["artifact_id"])
        assert body.headers["content-type"] == "image/png"
        assert body.content == replicate_fake.files["image"][1]

    async def test_a_version_id_and_prefer_wait(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        version = "a" * 64
        cred = await credential(client, owner, "replicate")
        run = await run_graph(client, owner, image_graph(cred, model=version, wait_seconds=5))
        assert run["status"] == "completed", run
        _method, path, headers, sent = next(r for r in replicate_fake.requests if r[0] == "POST")
        assert (path, sent["version"], headers["Prefer"]) == ("/v1/predictions", version, "wait=5")
        # Finished within the create call: not polled.
        assert not [r for r in replicate_fake.requests if r[0] == "GET" and "/v1/" in r[1]]

    async def test_429_and_5xx_are_retried(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        replicate_fake.script.seconds = 0.5
        replicate_fake.script.before = [
            (
                "POST",
                r"/v1/models/.*",
                429,
                {"Retry-After": "1"},
                {"detail": "Request was throttled."},
            ),
            ("GET", r"/v1/predictions/\w+", 503, {}, {"detail": "unavailable"}),
            ("GET", r"/v1/predictions/\w+", 500, {}, {"detail": "internal"}),
        ]
        cred = await credential(client, owner, "replicate")
        run = await run_graph(client, owner, image_graph(cred))
        assert run["status"] == "completed", run
        assert replicate_fake.submissions == 1  # the 429 was not a submission
        assert replicate_fake.script.before == []

    async def test_a_create_answered_503_is_not_sent_again(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        # Only a 429 says the prediction was not made; after a 503 it may have been (and
        # be billed): the node fails rather than create a second one.
        replicate_fake.script.before = [
            ("POST", r"/v1/models/.*", 503, {"Retry-After": "0"}, {"detail": "unavailable"})
        ]
        cred = await credential(client, owner, "replicate")
        run = await run_graph(client, owner, image_graph(cred))
        assert run["status"] == "failed", run
        gen = node_of(run, "gen")
        assert gen["error"]["message"] == "Replicate refused the request (HTTP 503): unavailable"
        assert gen["credits_used"] == 0
        assert [r[0] for r in replicate_fake.requests if r[1].startswith("/v1/models/")] == ["POST"]

    async def test_a_failed_prediction_is_quoted_and_charges_nothing(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        replicate_fake.script.fail = "CUDA out of memory: tried to allocate 2.00 GiB"
        cred = await credential(client, owner, "replicate")
        before = await balance(client, owner)
        run = await run_graph(client, owner, image_graph(cred))
        assert run["status"] == "failed"
        gen = node_of(run, "gen")
        assert gen["error"]["code"] == "provider_error"
        assert gen["error"]["message"] == (
            "Replicate failed: CUDA out of memory: tried to allocate 2.00 GiB"
        )
        assert gen["credits_used"] == 0
        assert run["credits_used"] == 1  # the gradient only
        assert await balance(client, owner) == before - 1

    async def test_a_refused_token_is_quoted_without_the_token(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        r = await client.post(
            "/api/v1/credentials",
            json={"name": "bad", "kind": "replicate", "fields": {"api_token": "r8_wrong-0000000"}},
            headers=owner.headers,
        )
        run = await run_graph(client, owner, image_graph(r.json()["id"]))
        gen = node_of(run, "gen")
        assert gen["error"]["message"] == "Replicate refused the request (HTTP 401): Invalid token."

    async def test_the_connection_test_asks_for_the_account(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        cred = await credential(client, owner, "replicate")
        r = await client.post(f"/api/v1/credentials/{cred}/test", headers=owner.headers)
        assert r.json() == {
            "ok": True,
            "status": 200,
            "message": "Replicate accepted the token (account fakeuser)",
        }
        assert replicate_fake.requests[-1][:2] == ("GET", "/v1/account")
        r = await client.post(
            "/api/v1/credentials",
            json={"name": "bad", "kind": "replicate", "fields": {"api_token": "r8_wrong-0000000"}},
            headers=owner.headers,
        )
        r = await client.post(f"/api/v1/credentials/{r.json()['id']}/test", headers=owner.headers)
        assert r.json() == {
            "ok": False,
            "status": 401,
            "message": "Replicate refused the request (HTTP 401): Invalid token.",
        }

    async def test_an_output_at_a_private_address_is_refused(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        replicate_fake.script.output_url = "http://127.0.0.2:8080/secret.png"
        cred = await credential(client, owner, "replicate")
        run = await run_graph(client, owner, image_graph(cred))
        gen = node_of(run, "gen")
        assert gen["status"] == "failed"
        assert "refusing to connect to 127.0.0.2" in gen["error"]["message"]
        assert gen["credits_used"] == 0

    async def test_an_oversized_output_is_refused(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        replicate_fake.script.output = "big"
        cred = await credential(client, owner, "replicate")
        run = await run_graph(client, owner, image_graph(cred))
        gen = node_of(run, "gen")
        assert gen["error"]["code"] == "limit_exceeded"
        assert "200,000 bytes" in gen["error"]["message"]

    async def test_cancelling_the_run_cancels_the_prediction(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        replicate_fake.script.seconds = 30
        cred = await credential(client, owner, "replicate")
        wf = await create_workflow(client, owner, image_graph(cred))
        r = await execute(client, owner, wf, {"cache": False})
        run_id = r.json()["run_id"]
        for _ in range(200):
            if replicate_fake.submissions:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        r = await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=owner.headers)
        assert r.status_code == 202, r.text
        run = await wait_for_run(client, owner, wf, run_id)
        assert run["status"] == "cancelled"
        for _ in range(100):
            if replicate_fake.cancels:
                break
            await asyncio.sleep(0.05)
        assert replicate_fake.cancels == list(replicate_fake.jobs)
        assert node_of(run, "gen")["credits_used"] == 0

    async def test_a_text_model(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        replicate_fake.script.output = "text"
        cred = await credential(client, owner, "replicate")
        graph = g(
            [
                n("in", "TextInput", text="tell a story"),
                n(
                    "llm",
                    "ReplicateModelText",
                    credential=cred,
                    model="meta/meta-llama-3-8b-instruct",
                    bindings={"prompt": "text"},
                ),
            ],
            [e("in", "llm", "text")],
        )
        run = await run_graph(client, owner, graph)
        assert run["status"] == "completed", run
        body = await artifact(client, owner, node_of(run, "llm")["artifact_id"])
        assert body.text == "Once upon a time"


class TestFal:
    async def test_the_connection_test_asks_for_a_price(
        self, client: httpx.AsyncClient, owner: User, fal_fake: FakeFal
    ) -> None:
        cred = await credential(client, owner, "fal")
        r = await client.post(f"/api/v1/credentials/{cred}/test", headers=owner.headers)
        assert r.json() == {"ok": True, "status": 200, "message": "fal accepted the key"}
        method, path, headers, _ = fal_fake.requests[-1]
        assert (method, path) == ("GET", "/v1/models/pricing?endpoint_id=fal-ai/flux/dev")
        assert headers["Authorization"] == f"Key {FAL_KEY}"
        assert fal_fake.submissions == 0  # nothing paid for
        r = await client.post(
            "/api/v1/credentials",
            json={"name": "bad", "kind": "fal", "fields": {"api_key": "wrong:key-0000000000"}},
            headers=owner.headers,
        )
        r = await client.post(f"/api/v1/credentials/{r.json()['id']}/test", headers=owner.headers)
        assert r.json() == {
            "ok": False,
            "status": 401,
            "message": "fal refused the request (HTTP 401): Invalid token.",
        }

    async def test_a_model_through_the_queue_jpeg_becomes_png(
        self, client: httpx.AsyncClient, owner: User, fal_fake: FakeFal
    ) -> None:
        fal_fake.script.seconds = 1.0
        fal_fake.script.output = "jpeg"
        cred = await credential(client, owner, "fal")
        run = await run_graph(
            client,
            owner,
            image_graph(
                cred,
                type="FalModel",
                model="fal-ai/flux/dev",
                bindings={"prompt": "text", "image_url": "image"},
            ),
        )
        assert run["status"] == "completed", run
        body = await artifact(client, owner, node_of(run, "gen")["artifact_id"])
        assert body.headers["content-type"] == "image/png"
        assert body.content[:8] == b"\x89PNG\r\n\x1a\n"
        _method, path, headers, sent = next(r for r in fal_fake.requests if r[0] == "POST")
        assert (path, headers["Authorization"]) == ("/fal-ai/flux/dev", f"Key {FAL_KEY}")
        assert sent["prompt"] == "a red fox" and sent["image_url"].startswith("data:image/png")
        statuses = [r for r in fal_fake.requests if r[1].endswith("/status?logs=1")]
        assert len(statuses) >= 2

    async def test_a_failed_request_is_quoted(
        self, client: httpx.AsyncClient, owner: User, fal_fake: FakeFal
    ) -> None:
        fal_fake.script.fail = "prompt must not be empty"
        cred = await credential(client, owner, "fal")
        run = await run_graph(
            client, owner, image_graph(cred, type="FalModel", model="fal-ai/flux/dev")
        )
        gen = node_of(run, "gen")
        assert gen["error"]["message"] == "fal failed (HTTP 422): prompt must not be empty"
        assert gen["credits_used"] == 0

    @pytest.mark.parametrize(
        ("status_says", "message", "result_reads"),
        [
            # The COMPLETED status carries the error: no result to read.
            (True, "fal failed: Runner disconnected (runner_disconnected)", 0),
            # Only the result tells (a 500): read once, not asked again.
            (False, "fal failed (HTTP 500): Runner disconnected", 1),
        ],
    )
    async def test_a_request_fal_gave_up_on_fails_at_once(
        self,
        client: httpx.AsyncClient,
        owner: User,
        fal_fake: FakeFal,
        status_says: bool,
        message: str,
        result_reads: int,
    ) -> None:
        # fal ends a request it gave up on (its runner lost) as COMPLETED with an error.
        fal_fake.script.fail = "Runner disconnected"
        fal_fake.script.fal_error_type = "runner_disconnected"
        fal_fake.script.fal_status_quiet = not status_says
        cred = await credential(client, owner, "fal")
        run = await run_graph(
            client, owner, image_graph(cred, type="FalModel", model="fal-ai/flux/dev")
        )
        gen = node_of(run, "gen")
        assert gen["status"] == "failed" and gen["credits_used"] == 0
        assert gen["error"]["message"] == message
        (job_id,) = fal_fake.jobs
        results = [r for r in fal_fake.requests if r[0] == "GET" and r[1].endswith(job_id)]
        assert len(results) == result_reads

    async def test_cancelling_the_run_cancels_the_request(
        self, client: httpx.AsyncClient, owner: User, fal_fake: FakeFal
    ) -> None:
        fal_fake.script.seconds = 30
        cred = await credential(client, owner, "fal")
        wf = await create_workflow(
            client, owner, image_graph(cred, type="FalModel", model="fal-ai/flux/dev")
        )
        run_id = (await execute(client, owner, wf, {"cache": False})).json()["run_id"]
        for _ in range(200):
            if fal_fake.submissions:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=owner.headers)
        run = await wait_for_run(client, owner, wf, run_id)
        assert run["status"] == "cancelled"
        for _ in range(100):
            if fal_fake.cancels:
                break
            await asyncio.sleep(0.05)
        assert fal_fake.cancels == list(fal_fake.jobs)


class TestFamilies:
    async def test_text_to_video_at_replicate_is_charged_per_second(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        replicate_fake.script.output = "video"
        cred = await credential(client, owner, "replicate")
        graph = g(
            [
                n("in", "TextInput", text="waves at dusk"),
                n(
                    "vid",
                    "TextToVideo",
                    credential=cred,
                    model="kwaivgi/kling-v2.1",
                    duration_seconds=5,
                ),
            ],
            [e("in", "vid")],
        )
        run = await run_graph(client, owner, graph)
        assert run["status"] == "completed", run
        vid = node_of(run, "vid")
        assert vid["credits_used"] == 10 + 10 * 2  # the fake's clip lasts 2 s (5 were held)
        assert run["estimated_credits"] >= 10 + 10 * 5
        body = await artifact(client, owner, vid["artifact_id"])
        assert body.headers["content-type"] == "video/mp4"
        sent = next(r for r in replicate_fake.requests if r[0] == "POST")[3]
        assert sent["input"] == {"prompt": "waves at dusk", "duration": 5}

    async def test_image_to_video_at_fal(
        self, client: httpx.AsyncClient, owner: User, fal_fake: FakeFal
    ) -> None:
        fal_fake.script.output = "video"
        cred = await credential(client, owner, "fal")
        graph = g(
            [
                n("pic", "GradientBackground", width=8, height=8),
                n(
                    "vid",
                    "ImageToVideo",
                    credential=cred,
                    model="fal-ai/kling-video/v2/master/image-to-video",
                ),
            ],
            [e("pic", "vid", "image")],
        )
        run = await run_graph(client, owner, graph)
        assert run["status"] == "completed", run
        _method, path, _, sent = next(r for r in fal_fake.requests if r[0] == "POST")
        assert path == "/fal-ai/kling-video/v2/master/image-to-video"
        assert sent["image_url"].startswith("data:image/png;base64,") and sent["duration"] == 5
        assert "prompt" not in sent

    async def test_text_to_music_at_fal_wav_becomes_mp3(
        self, client: httpx.AsyncClient, owner: User, fal_fake: FakeFal
    ) -> None:
        fal_fake.script.output = "wav"
        cred = await credential(client, owner, "fal")
        graph = g(
            [
                n("in", "TextInput", text="lofi beat"),
                n(
                    "mus",
                    "TextToMusic",
                    credential=cred,
                    model="fal-ai/stable-audio",
                    duration_seconds=3,
                    duration_field="seconds_total",
                ),
            ],
            [e("in", "mus")],
        )
        run = await run_graph(client, owner, graph)
        assert run["status"] == "completed", run
        mus = node_of(run, "mus")
        body = await artifact(client, owner, mus["artifact_id"])
        assert body.headers["content-type"] == "audio/mpeg"
        assert mus["credits_used"] == 5 + 1  # one started second of output
        sent = next(r for r in fal_fake.requests if r[0] == "POST")[3]
        assert sent == {"prompt": "lofi beat", "seconds_total": 3}

    async def test_a_credential_of_another_kind_is_refused_at_save(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.post(
            "/api/v1/credentials",
            json={
                "name": "o",
                "kind": "openai",
                "fields": {"base_url": "http://127.0.0.1:9/v1", "api_key": "sk-x0123456789"},
            },
            headers=owner.headers,
        )
        graph = g(
            [
                n("in", "TextInput", text="x"),
                n("vid", "TextToVideo", credential=r.json()["id"], model="a/b"),
            ],
            [e("in", "vid")],
        )
        r = await client.post(
            "/api/v1/workflows", json={"name": "w", "graph_json": graph}, headers=owner.headers
        )
        assert r.status_code == 400
        assert r.json()["errors"][0]["message"].endswith("this node takes a replicate or fal one")

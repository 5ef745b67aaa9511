"""Files bound to a Replicate or fal model's input are uploaded first when they are past
``NODELOOM_PROVIDER_INLINE_MAX_BYTES``, as the official clients upload them, and the model is
sent the file's URL: Replicate's ``POST /v1/files`` (multipart) and its ``urls.get``, fal's
storage (initiate, PUT to the signed URL without the key) and its ``file_url``. Small files
stay inline. The fakes refuse a submission carrying more data: URI bytes than the limit
they are given, and a model fails on a file URL nobody uploaded. A Replicate webhook
delivery, which echoes the prediction's input, then carries the URL, not the file. Through
the app over HTTP against the fakes on 127.0.0.1, on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from tests.conftest import User
from tests.providers.fakes import FAL_KEY, REPLICATE_TOKEN, FakeFal, FakeReplicate
from tests.providers.test_hosted import artifact, credential, node_of, run_graph
from tests.providers.test_replicate_webhooks import served  # noqa: F401 - a fixture
from tests.runs_helpers import e, g, n
from tests.server import free_port

INLINE_MAX = 300  # bytes: the 128x128 gradient of these graphs is larger


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def api_port() -> int:
    return free_port()


@pytest.fixture
def settings_overrides(
    replicate_fake: FakeReplicate, fal_fake: FakeFal, api_port: int
) -> dict[str, object]:
    return {
        "base_url": f"http://127.0.0.1:{api_port}",
        "http_allowlist": ["127.0.0.1/32"],
        "replicate_api_url": replicate_fake.url + "/v1",
        "replicate_webhook_poll_seconds": 60.0,
        "fal_queue_url": fal_fake.url,
        "fal_rest_url": fal_fake.url,
        "provider_max_retries": 3,
        "provider_inline_max_bytes": INLINE_MAX,
    }


def graph(cred: str, node_type: str, model: str, field: str, size: int = 128) -> dict[str, Any]:
    return g(
        [
            n("in", "TextInput", text="a red fox"),
            n("pic", "GradientBackground", width=size, height=size),
            n(
                "gen",
                node_type,
                credential=cred,
                model=model,
                bindings={"prompt": "text", field: "image"},
            ),
        ],
        [e("in", "gen", "text"), e("pic", "gen", "image")],
    )


async def picture(client: httpx.AsyncClient, owner: User, run: dict[str, Any]) -> bytes:
    return (await artifact(client, owner, node_of(run, "pic")["artifact_id"])).content


def posts(fake: FakeReplicate | FakeFal, path: str) -> list[tuple[str, str, dict[str, str], Any]]:
    return [r for r in fake.requests if r[0] == "POST" and r[1].split("?")[0] == path]


class TestReplicate:
    async def test_a_large_input_is_uploaded_and_sent_as_its_url(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        replicate_fake.script.data_uri_max = INLINE_MAX  # inline past it: refused, 413
        cred = await credential(client, owner, "replicate")
        flux = "black-forest-labs/flux-schnell"
        run = await run_graph(client, owner, graph(cred, "ReplicateModel", flux, "image"))
        assert run["status"] == "completed", run
        png = await picture(client, owner, run)
        assert len(png) > INLINE_MAX
        # The file went first, as replicate-python's files.create sends it...
        (upload,) = posts(replicate_fake, "/v1/files")
        assert upload[2]["Authorization"] == f"Bearer {REPLICATE_TOKEN}"
        assert upload[2]["Content-Type"].startswith("multipart/form-data; boundary=")
        (name, content_type, data) = next(iter(replicate_fake.uploads.values()))
        assert (content_type, data) == ("image/png", png)
        assert name.endswith(".png")
        # ... and the prediction names it by its urls.get.
        (create,) = posts(replicate_fake, f"/v1/models/{flux}/predictions")
        sent = create[3]["input"]
        assert sent["prompt"] == "a red fox"
        assert replicate_fake.upload_of(sent["image"])[2] == png
        assert sent["image"].startswith(replicate_fake.url + "/v1/files/")
        assert replicate_fake.submissions == 1

    async def test_a_small_input_stays_inline(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        cred = await credential(client, owner, "replicate")
        flux = "black-forest-labs/flux-schnell"
        run = await run_graph(client, owner, graph(cred, "ReplicateModel", flux, "image", 2))
        assert run["status"] == "completed", run
        png = await picture(client, owner, run)
        assert len(png) <= INLINE_MAX
        assert not posts(replicate_fake, "/v1/files")
        sent = posts(replicate_fake, f"/v1/models/{flux}/predictions")[0][3]["input"]
        assert sent["image"] == "data:image/png;base64," + base64.b64encode(png).decode()

    async def test_an_upload_answered_429_is_sent_again(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        busy = {
            "title": "Request was throttled.",
            "detail": "Request was throttled.",
            "status": 429,
        }
        replicate_fake.script.before.append(("POST", "/v1/files", 429, {"Retry-After": "0"}, busy))
        cred = await credential(client, owner, "replicate")
        flux = "black-forest-labs/flux-schnell"
        run = await run_graph(client, owner, graph(cred, "ReplicateModel", flux, "image"))
        assert run["status"] == "completed", run
        assert len(posts(replicate_fake, "/v1/files")) == 2
        assert len(replicate_fake.uploads) == 1 and replicate_fake.submissions == 1

    async def test_the_fake_fails_a_model_on_a_file_never_uploaded(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        cred = await credential(client, owner, "replicate")
        params = {"image": replicate_fake.url + "/v1/files/nosuchfile"}
        g_ = g(
            [n("gen", "ReplicateModel", credential=cred, model="a/b", input=params)],
            [],
        )
        run = await run_graph(client, owner, g_)
        assert run["status"] == "failed", run
        assert "Failed to download input file" in node_of(run, "gen")["error"]["message"]

    @pytest.mark.usefixtures("served")
    async def test_a_webhook_delivery_echoes_the_url_not_the_file(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        replicate_fake.script.webhooks = True
        replicate_fake.script.seconds = 0.6
        cred = await credential(client, owner, "replicate")
        flux = "black-forest-labs/flux-schnell"
        run = await run_graph(client, owner, graph(cred, "ReplicateModel", flux, "image", 512))
        assert run["status"] == "completed", run
        # Completed on the deliveries (the fallback poll is a minute away), each taken.
        assert replicate_fake.deliveries and all(d[2] == 200 for d in replicate_fake.deliveries)
        assert ("completed", "succeeded", 200) in replicate_fake.deliveries
        (job,) = replicate_fake.jobs.values()
        assert not [v for v in job.input.values() if str(v).startswith("data:")]
        assert job.input["image"].startswith(replicate_fake.url + "/v1/files/")


class TestFal:
    async def test_a_large_input_goes_to_fal_storage_and_is_sent_as_its_url(
        self, client: httpx.AsyncClient, owner: User, fal_fake: FakeFal
    ) -> None:
        fal_fake.script.data_uri_max = INLINE_MAX
        cred = await credential(client, owner, "fal")
        run = await run_graph(
            client, owner, graph(cred, "FalModel", "fal-ai/flux/dev", "image_url")
        )
        assert run["status"] == "completed", run
        png = await picture(client, owner, run)
        (initiate,) = posts(fal_fake, "/storage/upload/initiate")
        assert initiate[1] == "/storage/upload/initiate?storage_type=gcs"
        assert initiate[2]["Authorization"] == f"Key {FAL_KEY}"
        assert initiate[3]["content_type"] == "image/png"
        assert initiate[3]["file_name"].endswith(".png")
        (put,) = [r for r in fal_fake.requests if r[0] == "PUT"]
        assert "Authorization" not in put[2]  # the signed URL is the PUT's only credential
        assert put[2]["Content-Type"] == "image/png"
        (create,) = posts(fal_fake, "/fal-ai/flux/dev")
        sent = create[3]
        assert sent["prompt"] == "a red fox"
        assert sent["image_url"].startswith(fal_fake.url + "/gcs/files/")
        assert fal_fake.upload_of(sent["image_url"])[2] == png
        assert fal_fake.submissions == 1

    async def test_a_small_input_stays_inline(
        self, client: httpx.AsyncClient, owner: User, fal_fake: FakeFal
    ) -> None:
        cred = await credential(client, owner, "fal")
        run = await run_graph(
            client, owner, graph(cred, "FalModel", "fal-ai/flux/dev", "image_url", 2)
        )
        assert run["status"] == "completed", run
        assert not posts(fal_fake, "/storage/upload/initiate")
        assert posts(fal_fake, "/fal-ai/flux/dev")[0][3]["image_url"].startswith("data:image/png")

    async def test_a_refused_upload_is_quoted_and_nothing_is_submitted(
        self, client: httpx.AsyncClient, owner: User, fal_fake: FakeFal
    ) -> None:
        refusal = {"detail": "Storage quota exceeded"}
        fal_fake.script.before.append(("POST", "/storage/upload/initiate", 403, {}, refusal))
        cred = await credential(client, owner, "fal")
        run = await run_graph(
            client, owner, graph(cred, "FalModel", "fal-ai/flux/dev", "image_url")
        )
        assert run["status"] == "failed", run
        error = node_of(run, "gen")["error"]
        assert "Storage quota exceeded" in error["message"] and FAL_KEY not in error["message"]
        assert fal_fake.submissions == 0

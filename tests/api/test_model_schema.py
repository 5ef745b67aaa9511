"""GET /api/v1/credentials/{id}/model-schema: a Replicate or fal model's input schema for
the editor, read over HTTP with the account's credential from fakes of Replicate's and fal's
published APIs on 127.0.0.1. References resolved, the provider's refusals quoted, another
account's credential 404, another kind 400, the token never in an answer. On SQLite and
PostgreSQL."""

from __future__ import annotations

import time

import httpx
import pytest
from fastapi import FastAPI

from tests.api.test_auth import assert_problem
from tests.conftest import User
from tests.providers.fakes import FAL_KEY, FLUX_VERSION, REPLICATE_TOKEN, FakeFal, FakeReplicate
from tests.providers.test_hosted import credential

FLUX = "black-forest-labs/flux-schnell"
URL = "/api/v1/credentials/{}/model-schema"


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides(replicate_fake: FakeReplicate, fal_fake: FakeFal) -> dict[str, object]:
    return {
        "http_allowlist": ["127.0.0.1/32"],
        "replicate_api_url": replicate_fake.url + "/v1",
        "fal_api_url": fal_fake.url + "/v1",
        "rate_limit_api_key": 10_000,
    }


def model_gets(fake: FakeReplicate) -> list[str]:
    return [path for method, path, _h, _b in fake.requests if method == "GET"]


async def test_the_latest_versions_input_schema_with_enums_resolved(
    client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
) -> None:
    cred = await credential(client, owner, "replicate")
    r = await client.get(URL.format(cred), params={"model": FLUX}, headers=owner.headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == FLUX and body["version"] == FLUX_VERSION
    assert body["description"].startswith("The fastest image generation")
    schema = body["input"]
    assert schema["type"] == "object" and schema["required"] == ["prompt"]
    props = schema["properties"]
    order = sorted(props, key=lambda name: props[name]["x-order"])
    assert order[:3] == ["prompt", "aspect_ratio", "num_outputs"]
    # The enum came from its component, its own default and order kept; no $ref left.
    aspect = props["aspect_ratio"]
    assert aspect["enum"][:2] == ["1:1", "16:9"] and aspect["default"] == "1:1"
    assert aspect["type"] == "string" and "allOf" not in aspect and "$ref" not in r.text
    assert props["num_outputs"] == {**props["num_outputs"], "minimum": 1, "maximum": 4}
    assert body["output"]["type"] == "array"
    # Read with the credential's token, on Replicate's published path; never echoed back.
    method, path, headers, _ = replicate_fake.requests[-1]
    assert (method, path) == ("GET", f"/v1/models/{FLUX}")
    assert headers["Authorization"] == f"Bearer {REPLICATE_TOKEN}"
    assert REPLICATE_TOKEN not in r.text

    # Asked again at once: answered from the short cache, Replicate not asked twice.
    again = await client.get(URL.format(cred), params={"model": FLUX}, headers=owner.headers)
    assert again.json() == body
    assert model_gets(replicate_fake).count(f"/v1/models/{FLUX}") == 1


async def test_a_named_version(
    client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
) -> None:
    cred = await credential(client, owner, "replicate")
    model = f"{FLUX}:{FLUX_VERSION}"
    r = await client.get(URL.format(cred), params={"model": model}, headers=owner.headers)
    assert r.status_code == 200, r.text
    assert r.json()["version"] == FLUX_VERSION and r.json()["model"] == FLUX
    assert "prompt" in r.json()["input"]["properties"]
    assert model_gets(replicate_fake)[-1] == f"/v1/models/{FLUX}/versions/{FLUX_VERSION}"


async def test_an_unknown_model_is_404_quoting_replicate(
    client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
) -> None:
    cred = await credential(client, owner, "replicate")
    r = await client.get(
        URL.format(cred), params={"model": "nobody/nothing"}, headers=owner.headers
    )
    body = assert_problem(r, 404, "not_found")
    assert "Replicate" in str(body["detail"]) and "Not found." in str(body["detail"])


async def test_replicate_refusing_is_502_quoted_without_the_token(
    client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
) -> None:
    cred = await credential(client, owner, "replicate")
    # Replicate quoting the token it refused: it is masked in what we quote.
    replicate_fake.script.before.append(
        ("GET", f"/v1/models/{FLUX}", 401, {}, {"detail": f"Invalid token {REPLICATE_TOKEN}"})
    )
    r = await client.get(URL.format(cred), params={"model": FLUX}, headers=owner.headers)
    body = assert_problem(r, 502, "provider_error")
    assert "HTTP 401" in str(body["detail"]) and "Invalid token" in str(body["detail"])
    assert REPLICATE_TOKEN not in r.text
    # A refusal is not cached: the next call reads the schema.
    r = await client.get(URL.format(cred), params={"model": FLUX}, headers=owner.headers)
    assert r.status_code == 200, r.text


async def test_another_accounts_credential_is_404(
    client: httpx.AsyncClient, owner: User, other: User, replicate_fake: FakeReplicate
) -> None:
    cred = await credential(client, owner, "replicate")
    r = await client.get(URL.format(cred), params={"model": FLUX}, headers=other.headers)
    assert_problem(r, 404, "not_found")
    assert model_gets(replicate_fake) == []


async def test_another_kind_and_bad_models_are_400(
    client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
) -> None:
    r = await client.post(
        "/api/v1/credentials",
        json={"name": "b", "kind": "http_bearer", "fields": {"token": "t0ken-0123456789"}},
        headers=owner.headers,
    )
    bearer = r.json()["id"]
    r = await client.get(URL.format(bearer), params={"model": FLUX}, headers=owner.headers)
    assert "http_bearer credential" in str(assert_problem(r, 400, "invalid_request")["detail"])
    cred = await credential(client, owner, "replicate")
    for model in ["../../account", "no-slash", FLUX_VERSION]:
        r = await client.get(URL.format(cred), params={"model": model}, headers=owner.headers)
        body = assert_problem(r, 400, "invalid_request")
        assert body["errors"][0]["pointer"] == "query:model", body
    r = await client.get(URL.format(cred), headers=owner.headers)
    assert_problem(r, 400, "invalid_request")
    assert model_gets(replicate_fake) == []


async def test_a_replicate_that_does_not_answer_in_time_is_502(
    client: httpx.AsyncClient, app: FastAPI, owner: User, replicate_fake: FakeReplicate
) -> None:
    cred = await credential(client, owner, "replicate")
    app.state.ctx.settings.provider_timeout_seconds = 0.5
    replicate_fake.script.model_delay = 2.0
    started = time.monotonic()
    r = await client.get(URL.format(cred), params={"model": FLUX}, headers=owner.headers)
    assert time.monotonic() - started < 2.0
    body = assert_problem(r, 502, "provider_error")
    assert str(body["detail"]).startswith("Replicate did not answer")


class TestFal:
    async def test_an_endpoints_input_schema_from_its_openapi_document(
        self, client: httpx.AsyncClient, owner: User, fal_fake: FakeFal
    ) -> None:
        cred = await credential(client, owner, "fal")
        model = "fal-ai/flux/dev"
        r = await client.get(URL.format(cred), params={"model": model}, headers=owner.headers)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model"] == model and body["version"] is None
        assert body["description"].startswith("FLUX.1 [dev]")
        schema = body["input"]
        assert schema["type"] == "object" and schema["required"] == ["prompt"]
        props = schema["properties"]
        # fal's x-fal-order-properties became each field's x-order, as the editor reads it.
        assert sorted(props, key=lambda name: props[name]["x-order"]) == [
            "prompt",
            "image_size",
            "num_inference_steps",
        ]
        assert props["num_inference_steps"]["maximum"] == 50
        assert props["image_size"]["anyOf"][0]["properties"]["width"] == {"type": "integer"}
        assert body["output"]["properties"]["images"]["items"]["properties"]["url"]
        assert "$ref" not in r.text and FAL_KEY not in r.text
        method, path, headers, _ = fal_fake.requests[-1]
        assert method == "GET"
        assert path == "/v1/models?endpoint_id=fal-ai%2Fflux%2Fdev&expand=openapi-3.0"
        assert headers["Authorization"] == f"Key {FAL_KEY}"

    async def test_an_unknown_endpoint_is_404_and_a_malformed_one_400(
        self, client: httpx.AsyncClient, owner: User, fal_fake: FakeFal
    ) -> None:
        cred = await credential(client, owner, "fal")
        r = await client.get(
            URL.format(cred), params={"model": "fal-ai/nothing"}, headers=owner.headers
        )
        assert "fal has no model fal-ai/nothing" in assert_problem(r, 404, "not_found")["detail"]
        for model in ["no-slash", "fal-ai/a/b/c/d/e/f", "../x"]:
            r = await client.get(URL.format(cred), params={"model": model}, headers=owner.headers)
            assert_problem(r, 400, "invalid_request")

    async def test_fal_refusing_is_502_quoted_without_the_key(
        self, client: httpx.AsyncClient, owner: User, fal_fake: FakeFal
    ) -> None:
        cred = await credential(client, owner, "fal")
        fal_fake.script.before.append(
            ("GET", "/v1/models", 403, {}, {"detail": f"Key {FAL_KEY} is not allowed"})
        )
        r = await client.get(
            URL.format(cred), params={"model": "fal-ai/flux/dev"}, headers=owner.headers
        )
        body = assert_problem(r, 502, "provider_error")
        assert "HTTP 403" in body["detail"] and FAL_KEY not in r.text

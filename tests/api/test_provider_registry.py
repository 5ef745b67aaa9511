"""The providers' table (nodes/provider_registry.py) is the one place a provider is declared.

Every provider in it is a credential kind the API publishes (GET /credential-kinds, which the
web app's forms are built from) with the fields of its model, in the table's order; the API
stores a credential of it; when the provider declares a connection test, POST
/credentials/{id}/test runs that test (here it reaches the address check, which refuses the
loopback address the credential or the settings name), else it says there is none; and a
hosted-model provider has its model nodes in the catalog, also listed under its kind.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from nodeloom.nodes.provider_registry import PROVIDERS, Provider
from tests.conftest import User

LOOPBACK = "http://127.0.0.1:9"
SECRET = "sk-registrycred-0f1e2d3c4b5a6978"
# A value for each field a kind may require; a new field name fails here until it has one.
SAMPLES = {
    "base_url": LOOPBACK,
    "api_key": SECRET,
    "api_token": SECRET,
    "token": SECRET,
    "header_name": "X-Api-Key",
    "header_value": SECRET,
}
NO_TEST = "no connection test for this kind yet"


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    # The hosted-model APIs are reached at addresses the operator sets: loopback here, which
    # the address check refuses (nothing is allowlisted).
    return {"replicate_api_url": f"{LOOPBACK}/v1", "fal_api_url": f"{LOOPBACK}/v1"}


def fields_of(provider: Provider) -> dict[str, Any]:
    """Every required field, and base_url wherever the kind has one (loopback)."""
    model = provider.fields.model_fields
    return {
        name: SAMPLES[name]
        for name, info in model.items()
        if info.is_required() or name == "base_url"
    }


async def test_every_provider_is_a_kind_the_api_lists(
    client: httpx.AsyncClient, owner: User
) -> None:
    r = await client.get("/api/v1/credential-kinds", headers=owner.headers)
    assert r.status_code == 200
    listed = {k["kind"]: k for k in r.json()}
    assert list(listed) == [p.kind for p in PROVIDERS]
    for provider in PROVIDERS:
        kind = listed[provider.kind]
        assert kind["title"] == provider.title
        assert kind["testable"] is (provider.test is not None), provider.kind
        model = provider.fields
        assert [(f["name"], f["secret"]) for f in kind["fields"]] == [
            (name, name in model.SECRET) for name in model.model_fields
        ]
        if provider.hosted is not None:
            prefix = provider.hosted.prefix
            models = {f"{prefix}Model{s}" for s in ("", "Video", "Audio", "Text")}
            assert models <= set(kind["node_types"]), kind["node_types"]
            assert {"TextToVideo", "ImageToVideo", "TextToMusic"} <= set(kind["node_types"])

    r = await client.get("/api/v1/node-types", headers=owner.headers)
    assert r.status_code == 200
    types = {t["type"]: t for t in r.json()}
    for provider in PROVIDERS:
        if provider.hosted is not None:
            node = types[f"{provider.hosted.prefix}Model"]
            assert node["credential_kinds"] == [provider.kind]


@pytest.mark.parametrize("provider", PROVIDERS, ids=[p.kind for p in PROVIDERS])
async def test_a_provider_with_a_connection_test_is_tried_with_it(
    client: httpx.AsyncClient, owner: User, provider: Provider
) -> None:
    r = await client.post(
        "/api/v1/credentials",
        json={"name": provider.kind, "kind": provider.kind, "fields": fields_of(provider)},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    made = r.json()
    assert SECRET not in r.text

    r = await client.post(f"/api/v1/credentials/{made['id']}/test", headers=owner.headers)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["ok"] is False
    assert SECRET not in r.text
    if provider.test is None:
        assert answer == {"ok": False, "status": None, "message": NO_TEST}
    else:  # its test ran: it went for the loopback address and the address check refused it
        assert answer["status"] is None
        assert answer["message"].startswith("refusing to connect to 127.0.0.1"), answer
        assert answer["message"] != NO_TEST

"""Credentials through the Python client (sync and async) and the ``nodeloom credentials``
commands, against the package's real server. The server has no allow-list, so a connection
test of a loopback base_url is refused before any request is sent."""

from __future__ import annotations

import json

import pytest

from nodeloom.client import AsyncClient, Client, errors
from tests.client.conftest import Account, Live, cli
from tests.client.test_cli import Env

SECRET = "sk-clientcred-1234567890abcd"
ROTATED = "sk-clientrotated-0987654321wxyz"
LOOPBACK = "http://127.0.0.1:9/v1"


class TestClient:
    def test_every_method(self, nl: Client, live: Live) -> None:
        made = nl.credentials.create("local", "openai", {"base_url": LOOPBACK, "api_key": SECRET})
        assert made.kind == "openai" and made.hint == "sk-…abcd"
        assert made.fields == {"base_url": LOOPBACK}
        assert [c.id for c in nl.credentials.list()] == [made.id]
        assert nl.credentials.get(made.id) == made
        rotated = nl.credentials.update(made.id, name="renamed", fields={"api_key": ROTATED})
        assert rotated.name == "renamed" and rotated.hint == "sk-…wxyz"
        result = nl.credentials.test(made.id)
        assert not result.ok and "refusing to connect" in result.message
        with pytest.raises(errors.InvalidRequest) as caught:
            nl.credentials.create("x", "openai", {"base_url": "gopher://x", "api_key": SECRET})
        assert [p.pointer for p in caught.value.errors] == ["/fields/base_url"]
        other = live.account()
        with Client(live.url, other.api_key) as theirs, pytest.raises(errors.NotFound):
            theirs.credentials.get(made.id)
        nl.credentials.delete(made.id)
        with pytest.raises(errors.NotFound):
            nl.credentials.get(made.id)

    async def test_async(self, live: Live, account: Account) -> None:
        async with AsyncClient(live.url, account.api_key) as client:
            made = await client.credentials.create("bearer", "http_bearer", {"token": SECRET})
            assert made.fields == {} and made.hint == "sk-…abcd"
            listed = [c.id async for c in client.credentials.list(page_size=1)]
            assert listed == [made.id]
            result = await client.credentials.test(made.id)
            assert not result.ok and result.message == "no connection test for this kind yet"
            # A model's schema is read with a replicate or fal credential only.
            with pytest.raises(errors.InvalidRequest, match="http_bearer credential"):
                await client.credentials.model_schema(made.id, "acme/model")
            with pytest.raises(errors.NotFound):
                await client.credentials.model_schema("no-such-id", "acme/model")
            await client.credentials.delete(made.id)


class TestCommands:
    @pytest.fixture
    def env(self, live: Live, account: Account) -> Env:
        return {"NODELOOM_URL": live.url, "NODELOOM_API_KEY": account.api_key}

    def test_secrets_come_from_stdin_never_from_arguments(self, env: Env) -> None:
        refused = cli(
            "credentials", "create", "x", "--kind", "openai", "--field", f"api_key={SECRET}",
            env=env,
        )  # fmt: skip
        assert refused.returncode == 1 and "never an argument" in refused.stderr

        created = cli(
            "credentials", "create", "local", "--kind", "openai", "--field", f"base_url={LOOPBACK}",
            env=env, stdin=SECRET + "\n",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        credential_id = created.stdout.strip()
        listed = json.loads(cli("credentials", "list", "--json", env=env).stdout)
        assert [(c["id"], c["hint"]) for c in listed] == [(credential_id, "sk-…abcd")]
        table = cli("credentials", "list", env=env).stdout
        assert credential_id in table and f"base_url={LOOPBACK}" in table

        rotated = cli(
            "credentials", "update", credential_id, "--rotate", "--name", "renamed",
            env=env, stdin=ROTATED + "\n",
        )  # fmt: skip
        assert rotated.returncode == 0, rotated.stderr
        shown = json.loads(cli("credentials", "show", credential_id, env=env).stdout)
        assert shown["name"] == "renamed" and shown["hint"] == "sk-…wxyz"

        tested = cli("credentials", "test", credential_id, env=env)
        assert tested.returncode == 1 and "refusing to connect" in tested.stderr
        assert cli("credentials", "delete", credential_id, env=env).returncode == 0
        gone = cli("credentials", "show", credential_id, env=env)
        assert gone.returncode == 1 and "not_found" in gone.stderr
        for done in (refused, created, rotated, tested):
            for secret in (SECRET, ROTATED):
                assert secret not in done.stdout + done.stderr

"""The operator page in a real browser: the shared pool's servers and another account's (by
host and e-mail), a Drain click that holds across a restart of the server, and the account
seeing its own server drained on its credential. No prompt is sent: the servers named are
never called (a fleet is only contacted when a prompt needs it). With
``NODELOOM_DOCS_SCREENSHOTS=1`` the page's screenshot is written to docs/screenshots/ too."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import enter, new_tab
from tests.e2e.test_app_gallery import doc_shot
from tests.server import ServerProcess, free_port

pytest.importorskip("playwright")
from playwright.sync_api import expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

PASSWORD = "a long password"


def _login(server: ServerProcess, email: str) -> httpx.Client:
    """A client of the API as ``email`` (signed up now)."""
    http = httpx.Client(base_url=f"{server.base_url}/api/v1", timeout=30)
    signed = http.post("/auth/signup", json={"email": email, "password": PASSWORD})
    assert signed.is_success, signed.text
    token = http.post("/auth/login", json={"email": email, "password": PASSWORD}).json()
    http.headers["Authorization"] = f"Bearer {token['access_token']}"
    return http


def test_the_operator_drains_a_server_and_it_stays_drained(browser: Any, tmp_path: Path) -> None:
    pool = [
        {"base_url": f"http://127.0.0.1:{free_port()}", "name": "a100-1", "max_in_flight": 2},
        {"base_url": f"http://127.0.0.1:{free_port()}", "name": "a100-2", "draining": True},
    ]
    server = ServerProcess(
        tmp_path / "data",
        env={"NODELOOM_COMFYUI_POOL": json.dumps(pool), "NODELOOM_SIGNUP_ENABLED": "true"},
    )
    server.start()
    errors: list[str] = []
    try:
        tab = new_tab(browser, server, errors, viewport={"width": 1400, "height": 900})
        enter(tab, "owner@example.com", PASSWORD, "Sign up")  # the first account: the operator
        with contextlib.closing(_login(server, "ada@example.com")) as ada:
            fleet = {"servers": [{"base_url": f"http://127.0.0.1:{free_port()}", "name": "home"}]}
            made = ada.post(
                "/credentials", json={"name": "my GPUs", "kind": "comfyui", "fields": fleet}
            )
            assert made.status_code == 201, made.text
            credential = made.json()["id"]

            tab.get_by_role("link", name="Servers").click()
            tab.get_by_role("heading", name="ComfyUI servers").wait_for()
            shared = tab.get_by_role("table", name="Shared pool")
            expect(shared.get_by_role("row")).to_have_count(3)
            theirs = tab.get_by_role("table", name="Accounts\u2019 servers")
            expect(theirs).to_contain_text("ada@example.com")
            expect(theirs).not_to_contain_text(credential)
            expect(
                tab.get_by_role("button", name="Undrain a100-2 (set in its configuration)")
            ).to_be_disabled()

            tab.get_by_role("button", name="Drain a100-1").click()
            expect(tab.get_by_role("button", name="Undrain a100-1")).to_be_visible()
            theirs.get_by_role("button", name="Drain home").click()
            expect(theirs.get_by_role("button", name="Undrain home")).to_be_visible()
            doc_shot(tab, "operator-servers")

            # The account sees its own server drained, on its credential.
            (own,) = ada.get(f"/credentials/{credential}/servers").json()
            assert own["draining"] is True and own["name"] == "home"

            # Drains are rows in the database: a restarted server still has them.
            server.stop()
            server.start()
            tab.reload()
            expect(tab.get_by_role("button", name="Undrain a100-1")).to_be_visible()
            expect(theirs.get_by_role("button", name="Undrain home")).to_be_visible()
            tab.get_by_role("button", name="Undrain a100-1").click()
            expect(tab.get_by_role("button", name="Drain a100-1")).to_be_visible()
            (own,) = ada.get(f"/credentials/{credential}/servers").json()
            assert own["draining"] is True

        # The account, on its credential: its server drained, and undrained with a click.
        mine = new_tab(browser, server, errors, viewport={"width": 1400, "height": 900})
        enter(mine, "ada@example.com", PASSWORD)
        mine.goto("/profile")
        servers = mine.get_by_role("table", name="Servers of my GPUs")
        expect(servers).to_contain_text("draining")
        servers.get_by_role("button", name="Undrain home").click()
        expect(servers.get_by_role("button", name="Drain home")).to_be_visible()
        tab.reload()
        expect(theirs.get_by_role("button", name="Drain home")).to_be_visible()
    finally:
        server.stop()
    assert not errors, errors

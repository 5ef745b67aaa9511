"""The editor's History panel in a real browser: versions with their authors and messages, a
diff of params between two versions, restore (a new version, opened in the editor), and a
save from a stale tab refused with an offer to reload."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import api, shot, token
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "history@example.com"
PASSWORD = "a long password"


def greeting(template: str) -> dict[str, Any]:
    return {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {"text": "w"}},
            {
                "id": "tpl",
                "type": "TextTemplate",
                "position": {"x": 300, "y": 0},
                "data": {"template": template},
            },
        ],
        "edges": [{"id": "e1", "source": "in", "target": "tpl"}],
        "viewport": {"x": 40, "y": 80, "zoom": 1},
    }


class TestHistory:
    def test_diff_restore_and_a_lost_update(self, page: Page, server: ServerProcess) -> None:
        page.goto("/")
        page.get_by_label("Email").fill(EMAIL)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign up", exact=True).click()
        expect(page.get_by_role("heading", name="Workflows")).to_be_visible()
        with api(server, token(page)) as client:
            made = client.post(
                "/workflows",
                json={"name": "Greeting", "graph_json": greeting("Hello"), "message": "first"},
            )
            wf = made.json()["id"]
            r = client.patch(
                f"/workflows/{wf}",
                json={"graph_json": greeting("Goodbye"), "message": "say goodbye"},
                headers={"If-Match": '"v1"'},
            )
            assert r.status_code == 200, r.text

        page.goto(f"/workflows/{wf}")
        expect(page.get_by_test_id("save-state")).to_contain_text("version 2")
        page.get_by_role("button", name="History", exact=True).click()
        history = page.get_by_role("complementary", name="History")
        versions = history.get_by_role("list", name="Versions").get_by_role("button")
        expect(versions).to_have_count(2)
        expect(versions.nth(0)).to_contain_text("Version 2")
        expect(versions.nth(0)).to_contain_text("(current)")
        expect(versions.nth(0)).to_contain_text("say goodbye")
        expect(versions.nth(1)).to_contain_text(EMAIL)
        # Version 2 against version 1: the template param changed.
        diff = page.get_by_test_id("version-diff")
        expect(diff).to_contain_text('template: "Hello" → "Goodbye"')
        shot(page, "60-editor-history-diff-1400")

        versions.nth(1).click()
        against = diff.get_by_label("Changes in version 1 compared with")
        expect(against).to_have_value("")  # version 1 has no version before it
        expect(diff).to_contain_text("+ node tpl (TextTemplate)")
        against.select_option("2")
        expect(diff).to_contain_text('template: "Goodbye" → "Hello"')
        history.get_by_role("button", name="Restore version 1").click()
        expect(page.get_by_test_id("editor-banner")).to_contain_text(
            "Restored version 1: it is now version 3."
        )
        expect(page.get_by_test_id("save-state")).to_contain_text("version 3")
        with api(server, token(page)) as client:
            saved = client.get(f"/workflows/{wf}").json()
            listed = client.get(f"/workflows/{wf}/versions").json()
        assert saved["version"] == 3
        assert saved["graph_json"]["nodes"][1]["data"] == {"template": "Hello"}
        assert [(v["version"], v["restored_from"]) for v in listed] == [
            (3, 1),
            (2, None),
            (1, None),
        ]
        assert listed[0]["created_by"]["via"] == "jwt"

        # Another tab saves meanwhile; this tab's save is refused and offers a reload.
        with api(server, token(page)) as client:
            r = client.patch(f"/workflows/{wf}", json={"name": "Renamed elsewhere"})
            assert r.json()["version"] == 4
        name = page.get_by_role("textbox", name="Workflow name")
        name.fill("Renamed here")
        page.get_by_role("button", name="Save", exact=True).click()
        conflict = page.get_by_test_id("save-conflict")
        expect(conflict).to_contain_text("version 4 is the current one now")
        shot(page, "61-editor-save-conflict-1400")
        with api(server, token(page)) as client:
            assert client.get(f"/workflows/{wf}").json()["name"] == "Renamed elsewhere"
        conflict.get_by_role("button", name="Reload version 4").click()
        expect(name).to_have_value("Renamed elsewhere")
        expect(page.get_by_test_id("save-state")).to_contain_text("All changes saved · version 4")
        expect(conflict).to_be_hidden()
        # Saving from the reloaded editor works again.
        name.fill("Renamed here")
        page.get_by_role("button", name="Save", exact=True).click()
        expect(page.get_by_test_id("save-state")).to_contain_text("version 5")

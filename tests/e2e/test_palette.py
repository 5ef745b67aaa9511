"""The node palette as a new user meets it: what works on this server listed first (the
hosted-model nodes, which need a provider, no longer open it), and Enter in the search adds
the first match."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import enter, node, shot

pytest.importorskip("playwright")
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses


def test_the_palette_opens_on_what_works_and_enter_adds_the_first_match(page: Page) -> None:
    enter(page, "palette@example.com", "a long password", "Sign up")
    page.get_by_label("Name").fill("Palette")
    page.get_by_role("button", name="Create workflow").click()
    palette = page.get_by_role("complementary", name="Node palette")
    headings = palette.get_by_role("heading", level=3)
    expect(headings.first).to_be_visible()
    categories = headings.all_inner_texts()
    assert categories[-1].lower() == "ai", categories  # its nodes need a provider here
    # The first item listed works as it is (no note about a provider).
    first = palette.locator(".palette-item").first
    expect(first.locator(".palette-reason")).to_have_count(0)

    search = palette.get_by_role("searchbox")
    search.fill("resize")
    expect(palette).to_contain_text("Enter adds the first match: Resize image")
    search.press("Enter")
    expect(node(page, "Resize image")).to_be_visible()
    shot(page, "palette-enter-adds-first-match")

"""The first load of a workflow app's page (issue 35) in headless Chromium (Debian's, driven
by Playwright as tests/e2e does), against a real ``nodeloom serve`` on 127.0.0.1.

    .venv/bin/python -m bench.bench_app_page [--repeat 5] [--write]

The app is a small one (TextInput -> TextTemplate, no cover image). Each load is a cold one:
a new browser context (empty cache, no cookies, no storage) per load, ``--repeat`` loads per
profile, the median reported:

- **desktop**: a 1280x800 window;
- **phone**: a 390x844 window, the network and CPU as fast as this machine's;
- **phone, slow 4G**: the same window with the network and CPU of a mid-range phone as
  Lighthouse models one (150 ms round trip, 1.6 Mbit/s down, 750 kbit/s up, the CPU 4x
  slower), through the DevTools protocol.

**Bytes over the wire**: for every request the page makes (the HTML, its scripts and
styles, the icon, the form's API read), the bytes Chromium received for it as the server
sent them (``encodedDataLength`` of ``Network.loadingFinished``: headers and body, after any
content encoding). The app page is loaded twice over: as served (the hashed files gzipped,
api/compressed.py) and with the browser asking for ``Accept-Encoding: identity``, which is
what it cost before the server compressed them (the "before" of the same build).

**Time to interactive**: from the navigation's start to the moment the form is drawn with
its Run button enabled (noted in the page by a MutationObserver added before any script of
the page runs), so a visitor can type and run. Also the first contentful paint and the load
event. The main web app's first page (``/login``: its own entry, with the router and the
query library, before the editor's lazy chunk) is measured the same way for comparison.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from bench.common import ROOT, make_account, server, table, write_section

COMMAND = ".venv/bin/python -m bench.bench_app_page --write"
BUNDLE = ROOT / "src" / "nodeloom" / "web_dist" / "app.html"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
GRAPH: dict[str, Any] = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0},
         "data": {"key": "name", "text": "world"}},
        {"id": "tpl", "type": "TextTemplate", "position": {"x": 300, "y": 0},
         "data": {"template": "Hello {{ text }}!"}},
    ],
    "edges": [{"id": "e1", "source": "in", "target": "tpl"}],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}  # fmt: skip
# Lighthouse's mobile profile ("slow 4G" and a 4x CPU slowdown).
SLOW_4G = {
    "offline": False,
    "latency": 150,
    "downloadThroughput": 1_638_400 / 8,
    "uploadThroughput": 750_000 / 8,
}
CPU_SLOWDOWN = 4
# Noted in the page before its own scripts run: the moment the element that makes the page
# usable is there and enabled, in ms from the navigation's start.
READY_SCRIPT = """
(() => {
  const selector = %s;
  const look = () => {
    const el = document.querySelector(selector);
    if (el && !el.disabled && window.__nlReady === undefined) {
      window.__nlReady = performance.now();
      observer.disconnect();
    }
  };
  const observer = new MutationObserver(look);
  observer.observe(document, { childList: true, subtree: true, attributes: true });
})();
"""
TIMINGS = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const fcp = performance.getEntriesByName("first-contentful-paint")[0];
  return {
    ready: window.__nlReady,
    fcp: fcp ? fcp.startTime : null,
    load: nav.loadEventEnd,
  };
}"""


@dataclass
class Profile:
    name: str
    viewport: dict[str, int]
    slow: bool = False


PROFILES = [
    Profile("desktop 1280x800", {"width": 1280, "height": 800}),
    Profile("phone 390x844", {"width": 390, "height": 844}),
    Profile("phone 390x844, slow 4G, CPU 4x", {"width": 390, "height": 844}, slow=True),
]


@dataclass
class Load:
    wire: dict[str, int] = field(default_factory=dict)  # path -> bytes received
    ready_ms: float = 0.0
    fcp_ms: float = 0.0
    load_ms: float = 0.0


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise SystemExit("Chromium is missing: apt-get install chromium (make install does it)")
    return found


def one_load(
    browser: Any, base: str, path: str, ready: str, profile: Profile, identity: bool
) -> Load:
    # identity: the browser asks for no compression, as the server sent everything before it
    # compressed its files (the "before" of the same build).
    headers = {"Accept-Encoding": "identity"} if identity else {}
    context = browser.new_context(
        base_url=base, viewport=profile.viewport, extra_http_headers=headers
    )
    try:
        tab = context.new_page()
        cdp = context.new_cdp_session(tab)
        cdp.send("Network.enable")
        cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
        if profile.slow:
            cdp.send("Network.emulateNetworkConditions", SLOW_4G)
            cdp.send("Emulation.setCPUThrottlingRate", {"rate": CPU_SLOWDOWN})
        urls: dict[str, str] = {}
        load = Load()
        cdp.on(
            "Network.requestWillBeSent",
            lambda e: urls.__setitem__(e["requestId"], e["request"]["url"]),
        )

        def finished(event: dict[str, Any]) -> None:
            url = urls.get(event["requestId"], "?")
            parts = urlsplit(url)
            load.wire[parts.path] = load.wire.get(parts.path, 0) + int(event["encodedDataLength"])

        cdp.on("Network.loadingFinished", finished)
        tab.add_init_script(READY_SCRIPT % repr(ready))
        tab.goto(path, wait_until="load")
        tab.wait_for_function("() => window.__nlReady !== undefined", timeout=60_000)
        tab.wait_for_load_state("networkidle")
        timings = tab.evaluate(TIMINGS)
        load.ready_ms, load.fcp_ms, load.load_ms = (
            float(timings["ready"]),
            float(timings["fcp"] or 0),
            float(timings["load"]),
        )
        if profile.slow:  # never left on a renderer that a later load might share
            cdp.send("Emulation.setCPUThrottlingRate", {"rate": 1})
            cdp.send("Network.emulateNetworkConditions", {**SLOW_4G, "latency": 0,
                     "downloadThroughput": -1, "uploadThroughput": -1})  # fmt: skip
        return load
    finally:
        context.close()


def gzipped(base: str, paths: list[str]) -> dict[str, tuple[int, int]]:
    """Each path's body as served and gzip-compressed (level 6)."""
    out = {}
    with httpx.Client(base_url=base, timeout=30) as http:
        for path in paths:
            body = http.get(path).content
            out[path] = (len(body), len(gzip.compress(body, 6)))
    return out


def label(path: str) -> str:
    if path.startswith("/apps/"):
        return "the page (`/apps/<slug>`)"
    if path.startswith("/api/v1/public/apps/"):
        return "the form (`GET /api/v1/public/apps/<slug>`)"
    return f"`{path}`"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if not BUNDLE.exists():
        raise SystemExit("the web app is not built: make install")
    from playwright.sync_api import sync_playwright

    load_before = os.getloadavg()[0]
    with server(start_timeout=120) as srv:
        _, key = make_account(srv.base_url)
        with httpx.Client(
            base_url=srv.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as http:
            wf = http.post("/api/v1/workflows", json={"name": "hello", "graph_json": GRAPH})
            made = http.post(
                "/api/v1/apps",
                json={
                    "workflow_id": wf.json()["id"],
                    "title": "Say hello",
                    "description": "Type your name, get a greeting.",
                    "inputs": [{"key": "name", "label": "Your name", "max_length": 40}],
                    "outputs": [{"node_id": "tpl", "label": "Greeting"}],
                },
            )
            assert made.status_code == 201, made.text
        app_path = f"/apps/{made.json()['slug']}"
        run_button = ".app-form button[type=submit]"
        pages = [
            ("app page", app_path, run_button, False),
            ("app page, uncompressed (before)", app_path, run_button, True),
            ("web app `/login`", "/login", "form button[type=submit]", False),
        ]
        results: dict[tuple[str, str], list[Load]] = {}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
            try:
                # Interleaved (each round loads every page in every profile once), so a
                # burst of other work on the shared machine slows all rows alike.
                for round_no in range(args.repeat):
                    # Each round starts with another page: no page always comes first.
                    shift = round_no % len(pages)
                    for page_name, path, ready, identity in pages[shift:] + pages[:shift]:
                        for profile in PROFILES:
                            results.setdefault((page_name, profile.name), []).append(
                                one_load(browser, srv.base_url, path, ready, profile, identity)
                            )
            finally:
                browser.close()
        first = {name: results[(name, PROFILES[0].name)][0].wire for name, *_ in pages}
        sizes = {name: gzipped(srv.base_url, list(wire)) for name, wire in first.items()}
    body = report(pages, results, first, sizes, args.repeat)
    body += (
        f"\nLoad average (1 min) on the 2 cores, shared with other work: "
        f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.\n"
    )
    print(body)
    if args.write:
        write_section("app_page", COMMAND, body)


def report(
    pages: list[tuple[str, str, str, bool]],
    results: dict[tuple[str, str], list[Load]],
    first: dict[str, dict[str, int]],
    sizes: dict[str, dict[str, tuple[int, int]]],
    repeat: int,
) -> str:
    rows = []
    for page_name, *_ in pages:
        for profile in PROFILES:
            loads = results[(page_name, profile.name)]
            wire = statistics.median(sum(x.wire.values()) for x in loads)
            rows.append(
                (
                    page_name,
                    profile.name,
                    max(len(x.wire) for x in loads),
                    f"{wire / 1024:.1f}",
                    f"{statistics.median(x.fcp_ms for x in loads):.0f}",
                    f"{statistics.median(x.ready_ms for x in loads):.0f}",
                    f"{statistics.median(x.load_ms for x in loads):.0f}",
                )
            )
    summary = table(
        rows,
        (
            "page",
            "profile",
            "requests",
            "KiB over the wire",
            "first paint (ms)",
            "interactive (ms)",
            "load event (ms)",
        ),
    )
    detail = []
    for page_name, *_ in pages:
        for path, received in first[page_name].items():
            raw, small = sizes[page_name].get(path, (0, 0))
            detail.append((page_name, label(path), received, raw, small))
    requests = table(
        detail,
        ("page", "request", "bytes received (headers + body)", "body", "body gzipped (level 6)"),
    )
    return (
        "### Workflow apps: the page's first load (issue 35)\n\n"
        f"Cold loads (a new browser context each, cache off), the median of {repeat} per "
        "row; Debian's Chromium, headless. Interactive: the form drawn with its Run button "
        "enabled (`/login`: its Log in button), from the navigation's start. Bytes: what "
        "Chromium received for every request of the page, headers and body as sent. "
        "*Uncompressed (before)*: the same build, the browser asking for "
        "`Accept-Encoding: identity`, which is what every visitor got before the server "
        "compressed its files.\n\n"
        + summary
        + "\n\nEach request of one desktop load:\n\n"
        + requests
        + "\n"
    )


if __name__ == "__main__":
    main()

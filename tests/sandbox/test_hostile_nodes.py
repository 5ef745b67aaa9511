"""A tenant's node cannot hurt another tenant: work that burns CPU or memory is stopped by its
budget in a sandbox process while the server keeps answering everyone, and a node that keeps
killing its process is failed instead of resumed for ever. Against a real server process."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.live import Probe, account, descendants, node, rss_bytes, tree_cpu_seconds, wait_run
from tests.server import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # p99 budgets of the other requests

GB = 1024**3
MB = 1024**2
# 10^10 loop turns that produce nothing: only a budget can stop this. (Iterating a string is
# not counted by the template's range() limit.)
BURN = '{% for i in "x" * 100000 %}{% for j in "y" * 100000 %}{% endfor %}{% endfor %}x'


def _graph(template: str) -> dict[str, Any]:
    return {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
            {
                "id": "tpl",
                "type": "TextTemplate",
                "position": {"x": 1, "y": 0},
                "data": {"template": template},
            },
        ],
        "edges": [{"id": "e", "source": "in", "target": "tpl"}],
        "viewport": {"x": 0, "y": 0, "zoom": 1},
    }


def _server(tmp_path: Path, **env: str) -> ServerProcess:
    return ServerProcess(
        tmp_path / "data",
        env={"NODELOOM_RATE_LIMIT_API_KEY": "100000", "NODELOOM_SIGNUP_ENABLED": "true", **env},
    )


@contextlib.contextmanager
def _two_tenants(server: ServerProcess) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    """The attacker's client, and the headers of a second account with one workflow."""
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        yield _tenants(http)


def _tenants(http: httpx.Client) -> tuple[httpx.Client, dict[str, str]]:
    _, key = account(http, "attacker@example.com")
    _, victim_key = account(http, "victim@example.com")
    victim = {"Authorization": f"Bearer {victim_key}"}
    r = http.post(
        "/api/v1/workflows",
        json={"name": "mine", "graph_json": _graph("{{ text }}")},
        headers=victim,
    )
    assert r.status_code == 201, r.text
    http.headers["Authorization"] = f"Bearer {key}"
    return http, victim


def _run(
    http: httpx.Client, graph: dict[str, Any], timeout: float = 30, text: str = "hello"
) -> dict[str, Any]:
    r = http.post("/api/v1/workflows", json={"name": "hostile", "graph_json": graph})
    assert r.status_code == 201, r.text
    wf = r.json()["id"]
    r = http.post(f"/api/v1/workflows/{wf}/execute", json={"input": {"text": text}})
    assert r.status_code == 202, r.text
    return wait_run(http, wf, r.json()["run_id"], timeout)


def _idle_cpu(pid: int, seconds: float = 1.0) -> float:
    """CPU seconds the server's children spend over ``seconds`` (≈0 once nothing runs)."""
    before = tree_cpu_seconds(pid)
    time.sleep(seconds)
    return tree_cpu_seconds(pid) - before


def _pid(server: ServerProcess) -> int:
    assert server.proc is not None
    return server.proc.pid


def test_a_cpu_burning_template_is_stopped_while_everyone_else_is_served(
    tmp_path: Path,
) -> None:
    budgets = {"text": {"wall_seconds": 4, "cpu_seconds": 3}}
    server = _server(tmp_path, NODELOOM_NODE_BUDGETS=json.dumps(budgets))
    server.start()
    try:
        with _two_tenants(server) as (http, victim):
            paths = [("/healthz", {}), ("/api/v1/workflows", victim)]
            with Probe(server.base_url, paths) as probe:
                started = time.monotonic()
                run = _run(http, _graph(BURN))
                took = time.monotonic() - started
            assert run["status"] == "failed"
            error = node(run, "tpl")["error"]
            assert error["code"] == "node_timeout", error
            assert took < 10
            assert not probe.failures, probe.failures[:5]
            assert probe.p99() < 0.2, f"p99 {probe.p99() * 1000:.0f} ms while the template burned"
            assert _idle_cpu(_pid(server)) < 0.3, "the stopped template kept a core busy"

            # The exact template of the report: its loops are over 10^10 range() items.
            nested = (
                "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x"
            )
            run = _run(http, _graph(nested), timeout=10)
            assert run["status"] == "failed"
            assert "loops run over more than" in node(run, "tpl")["error"]["message"]
    finally:
        server.stop()


def test_templates_that_build_huge_values_cost_neither_time_nor_memory(tmp_path: Path) -> None:
    server = _server(tmp_path)
    server.start()
    try:
        with _two_tenants(server) as (http, _):
            pid = _pid(server)
            before = rss_bytes(pid)
            # Jinja would fold this constant while compiling: 400 MB inside the API request.
            folded = _graph("{{ 'ab' * 2*10**8 }}")
            for _ in range(4):
                started = time.monotonic()
                r = http.post("/api/v1/workflows", json={"name": "fold", "graph_json": folded})
                assert r.status_code == 201, r.text
                assert time.monotonic() - started < 2
            assert rss_bytes(pid) - before < 100 * MB

            run = _run(http, folded)
            assert run["status"] == "failed"
            assert "builds a value longer than" in node(run, "tpl")["error"]["message"]
            run = _run(http, _graph("{{ (text*10) * 10**8 }}"))
            assert run["status"] == "failed"
            assert "builds a value longer than" in node(run, "tpl")["error"]["message"]
            # What no operator check catches, the memory budget does.
            run = _run(http, _graph("{{ 'x'|center(10**9) }}"))
            assert run["status"] == "failed"
            assert node(run, "tpl")["error"]["code"] == "node_memory_limit"
            assert rss_bytes(pid) < 1 * GB
            assert rss_bytes(pid) - before < 150 * MB
    finally:
        server.stop()


def _ken_burns_graph(copies: int) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = [
        {
            "id": "img",
            "type": "GradientBackground",
            "position": {"x": 0, "y": 0},
            "data": {"width": 6000, "height": 6000},
        }
    ]
    edges = []
    for i in range(copies):
        nodes.append(
            {
                "id": f"kb{i}",
                "type": "KenBurns",
                "position": {"x": 1, "y": i},
                "data": {"width": 6000, "height": 6000, "fps": 60, "seconds": 10},
            }
        )
        edges.append({"id": f"e{i}", "source": "img", "target": f"kb{i}"})
    return {"nodes": nodes, "edges": edges, "viewport": {"x": 0, "y": 0, "zoom": 1}}


def test_oversized_media_is_stopped_by_its_memory_budget(tmp_path: Path) -> None:
    budgets = {"video": {"memory_mb": 512, "wall_seconds": 20}}
    server = _server(
        tmp_path, NODELOOM_NODE_BUDGETS=json.dumps(budgets), NODELOOM_SANDBOX_MEMORY_MB="1100"
    )
    server.start()
    try:
        with _two_tenants(server) as (http, victim):
            pid = _pid(server)
            r = http.post(
                "/api/v1/workflows", json={"name": "huge", "graph_json": _ken_burns_graph(4)}
            )
            assert r.status_code == 201, r.text
            wf = r.json()["id"]
            run_id = http.post(f"/api/v1/workflows/{wf}/execute").json()["run_id"]
            peak_tree = 0
            paths = [("/healthz", {}), ("/api/v1/workflows", victim)]
            with Probe(server.base_url, paths) as probe:
                deadline = time.monotonic() + 90
                while (run := http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json())[
                    "status"
                ] == "running":
                    tree = rss_bytes(pid) + sum(rss_bytes(p) for p in descendants(pid))
                    peak_tree = max(peak_tree, tree)
                    assert rss_bytes(pid) < 1 * GB
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            assert run["status"] == "failed"
            for i in range(4):
                error = node(run, f"kb{i}")["error"]
                assert error["code"] in {"node_memory_limit", "node_timeout"}, error
            # Two 512 MB budgets fit in 1,100 MB: never four encoders at once.
            assert peak_tree < 2 * GB, f"server and sandbox used {peak_tree / MB:.0f} MB"
            assert not probe.failures, probe.failures[:5]
            assert probe.p99() < 0.2, f"p99 {probe.p99() * 1000:.0f} ms during the encodes"
            assert _idle_cpu(pid) < 0.3, "a stopped encoder kept running"
    finally:
        server.stop()


def _wait_node_running(http: httpx.Client, wf: str, run_id: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        run = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json()
        if node(run, "tpl")["status"] == "running":
            return
        assert time.monotonic() < deadline, run
        time.sleep(0.05)


def test_a_node_that_keeps_taking_its_server_down_is_not_started_a_third_time(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    server = _server(tmp_path)
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as http:
            _, key = account(http, "crash@example.com")
            http.headers["Authorization"] = f"Bearer {key}"
            balance = http.get("/api/v1/me").json()["credits_balance"]
            wf = http.post("/api/v1/workflows", json={"name": "c", "graph_json": _graph(BURN)})
            wf_id = wf.json()["id"]
            run_id = http.post(f"/api/v1/workflows/{wf_id}/execute").json()["run_id"]
            for _ in range(2):
                _wait_node_running(http, wf_id, run_id)
                sandbox = descendants(_pid(server))
                assert sandbox, "the template should be running in a sandbox process"
                server.kill()
                # Nothing outlives the server: the fork server and its children go with it.
                deadline = time.monotonic() + 5
                while any(Path(f"/proc/{p}").exists() for p in sandbox):
                    assert time.monotonic() < deadline, "sandbox processes outlived the server"
                    time.sleep(0.05)
                server.start()
            run = wait_run(http, wf_id, run_id, 20)
            assert run["status"] == "failed"
            error = node(run, "tpl")["error"]
            assert error["code"] == "node_crashed", error
            assert run["error"]["code"] == "node_crashed"
            assert http.get("/api/v1/me").json()["credits_balance"] == balance
    finally:
        server.stop()
    with sqlite3.connect(data / "nodeloom.db") as db:
        attempts = dict(db.execute("select node_id, attempts from node_runs").fetchall())
    assert attempts["tpl"] == 2
    # Scratch space of the two killed processes was swept; the last one cleaned its own.
    assert list((data / "tmp").iterdir()) == []

"""Issue 2: GET /workflows (50 workflows, API-key auth) and POST /workflows (50-node graph)
at concurrency 16 against ``nodeloom serve``; also the database statements per request.

    .venv/bin/python -m bench.bench_api
"""

from __future__ import annotations

import json

import httpx

from bench.common import lua_request, make_account, server, table, write_section, wrk

SECONDS = 10
CONNECTIONS = 16


def chain_graph(length: int) -> dict[str, object]:
    nodes = [{"id": "n0", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {"text": "x"}}]
    nodes += [
        {
            "id": f"n{i}",
            "type": "TextTemplate",
            "position": {"x": i * 10, "y": 0},
            "data": {"template": f"{{{{ text }}}}{i}"},
        }
        for i in range(1, length)
    ]
    edges = [{"id": f"e{i}", "source": f"n{i - 1}", "target": f"n{i}"} for i in range(1, length)]
    return {"nodes": nodes, "edges": edges, "viewport": {"x": 0, "y": 0, "zoom": 1}}


def statements(base_url: str) -> float:
    text = httpx.get(f"{base_url}/metrics").text
    for line in text.splitlines():
        if line.startswith("nodeloom_db_statements "):
            return float(line.split()[1])
    return 0.0


def main() -> None:
    rows = []
    with server() as srv:
        _, key = make_account(srv.base_url)
        auth = {"Authorization": f"Bearer {key}"}
        graph = chain_graph(50)
        with httpx.Client(base_url=srv.base_url, headers=auth) as http:
            for i in range(50):
                http.post("/api/v1/workflows", json={"name": f"w{i}", "graph_json": graph})
            before = statements(srv.base_url)
            for _ in range(100):
                http.get("/api/v1/workflows")
            per_get = (statements(srv.base_url) - before) / 100
        wrk(
            f"{srv.base_url}/api/v1/workflows",
            connections=CONNECTIONS,
            seconds=3,
            lua=lua_request("GET", auth),
        )
        get = wrk(
            f"{srv.base_url}/api/v1/workflows",
            connections=CONNECTIONS,
            seconds=SECONDS,
            lua=lua_request("GET", auth),
        )
        body = json.dumps({"name": "bench", "graph_json": graph})
        post_lua = lua_request("POST", {**auth, "Content-Type": "application/json"}, body)
        post = wrk(
            f"{srv.base_url}/api/v1/workflows",
            connections=CONNECTIONS,
            seconds=SECONDS,
            lua=post_lua,
        )
        rows.append(
            (
                "GET /workflows (50 items, API key)",
                f"{get.rps:,.0f}",
                f"{get.p50_ms:.1f}",
                f"{get.p99_ms:.1f}",
                get.non_2xx,
                f"{per_get:.1f}",
            )
        )
        rows.append(
            (
                "POST /workflows (50-node graph)",
                f"{post.rps:,.0f}",
                f"{post.p50_ms:.1f}",
                f"{post.p99_ms:.1f}",
                post.non_2xx,
                "-",
            )
        )
    text = table(rows, ("request", "req/s", "p50 ms", "p99 ms", "non-2xx", "DB statements/request"))
    text += (
        f"\n\nwrk, 1 thread, {CONNECTIONS} connections, {SECONDS} s after a 3 s warm-up, "
        "on the same 2-core machine as the server (so the load generator takes CPU from it). "
        "API-key authentication is one indexed look-up of the key's HMAC (no argon2)."
    )
    print(text)
    write_section("api", ".venv/bin/python -m bench.bench_api", text)


if __name__ == "__main__":
    main()

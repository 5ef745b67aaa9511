"""TextTemplate as a user runs it: templates that only substitute render inline (on the
event loop, without Jinja), the rest in the sandbox, with the same answers either way."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import User
from tests.runs_helpers import create_workflow, e, execute, g, n, wait_for_run


class TestThroughTheApi:
    """The same templates executed as a user runs them: inline where they only substitute,
    in the sandbox otherwise, with the same answers."""

    async def _output(self, client: httpx.AsyncClient, owner: User, template: str) -> Any:
        graph = g([n("in", "TextInput"), n("t", "TextTemplate", template=template)], [e("in", "t")])
        wf = await create_workflow(client, owner, graph)
        body = {"input": {"text": "hi", "city": "Oslo", "list": [1, 2]}}
        run_id = (await execute(client, owner, wf, body)).json()["run_id"]
        run = await wait_for_run(client, owner, wf, run_id)
        node = {nr["node_id"]: nr for nr in run["node_runs"]}["t"]
        if node["status"] != "completed":
            return node["error"]["code"]
        r = await client.get(f"/api/v1/artifacts/{node['artifact_id']}", headers=owner.headers)
        return r.text

    async def test_substitutions_and_their_jinja_fallbacks(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        assert await self._output(client, owner, "{{ text }} in {{ input.city }}") == "hi in Oslo"
        assert await self._output(client, owner, "{{ input['list'][1] }}") == "2"
        # Ambiguous for the fast path: rendered by Jinja in the sandbox instead.
        assert (await self._output(client, owner, "{{ input.items }}")).startswith(
            "<built-in method items"
        )
        assert await self._output(client, owner, "{{ input.missing.x }}") == "node_failed"

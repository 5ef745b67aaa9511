"""The Nodeloom Python client.

    import nodeloom

    run = nodeloom.run("Greeting", input={"text": "there"})   # by id or name; waits
    for node_id, path in run.download("out").items():
        print(node_id, path)

    from nodeloom.client import Client

    with Client("http://127.0.0.1:8000", "nlk_...") as client:   # or NODELOOM_URL / _API_KEY
        workflow = client.workflows.create("examples/podcast-snippet.json")
        run = client.workflows.execute(workflow.id, input={"text": "Hello"}).wait(timeout=120)
        print(run.status, run.outputs())

``AsyncClient`` has the same methods, awaited. Answers are the server's own response models
(``nodeloom.schemas``); errors are one exception class per problem code
(``nodeloom.client.errors``). See docs/client.md.
"""

from nodeloom.client import errors
from nodeloom.client._core import AsyncClient
from nodeloom.client._resources import load_workflow
from nodeloom.client._runs import AsyncRun, RunEvent
from nodeloom.client._sync import Client, Run, run

__all__ = [
    "AsyncClient",
    "AsyncRun",
    "Client",
    "Run",
    "RunEvent",
    "errors",
    "load_workflow",
    "run",
]

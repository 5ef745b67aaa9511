"""The API's resources as methods: workflows, runs, artifacts, webhooks, schedules,
callbacks, API keys, credentials.

Every answer is parsed into the server's own response models (``nodeloom.schemas``), so the
client and the server cannot drift apart. Lists are async iterators that fetch the next page
only when the caller gets there.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import secrets
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar, Unpack
from urllib.parse import quote

import anyio
from pydantic import BaseModel

from nodeloom.client._runs import AsyncRun, RunClient, RunEvent, extension_for
from nodeloom.client._session import RequestOptions
from nodeloom.client._tus import RESUMABLE_ABOVE, upload_resumable
from nodeloom.client.errors import AmbiguousWorkflow, NotFound
from nodeloom.schemas.accounts import ApiKeyCreated, ApiKeyOut
from nodeloom.schemas.approvals import ApprovalList, ApprovalOut
from nodeloom.schemas.assets import AssetOut
from nodeloom.schemas.callbacks import (
    CallbackDeliveryOut,
    CallbackSecretCreated,
    CallbackSecretInfo,
)
from nodeloom.schemas.credentials import CredentialOut, CredentialTestResult, ModelSchemaOut
from nodeloom.schemas.runs import ArtifactMetadata, RunEstimate, RunStatusName, RunSummary
from nodeloom.schemas.schedules import ScheduleOut
from nodeloom.schemas.webhooks import WebhookOut
from nodeloom.schemas.workflows import (
    WorkflowOut,
    WorkflowSummary,
    WorkflowVersionOut,
    WorkflowVersionSummary,
)

WorkflowSource = Mapping[str, Any] | str | os.PathLike[str]
UPLOAD_CHUNK = 1024 * 1024


def _seg(value: str) -> str:
    """A path segment: ids are UUIDs, but never let a value change the path."""
    return quote(str(value), safe="")


def load_workflow(source: WorkflowSource, name: str | None = None) -> tuple[str, dict[str, Any]]:
    """(name, graph_json) from a dict or a JSON file holding either ``{"name", "graph_json"}``
    (what ``workflows pull`` writes and ``examples/`` holds) or a bare graph
    ``{"nodes", "edges", "viewport"}`` (then the name defaults to the file's stem)."""
    default_name = None
    if isinstance(source, Mapping):
        data: Any = dict(source)
    else:
        path = Path(source)
        data = json.loads(path.read_text(encoding="utf-8"))
        default_name = path.stem
    if not isinstance(data, dict):
        raise ValueError("a workflow is a JSON object")
    if "graph_json" in data:
        graph, name = data["graph_json"], name or data.get("name") or default_name
    elif "nodes" in data:
        graph, name = data, name or default_name
    else:
        raise ValueError("a workflow has graph_json (or is a graph with nodes, edges, viewport)")
    if not isinstance(name, str) or not name:
        raise ValueError("a workflow needs a name")
    return name, graph


def looks_like_id(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _if_match(version: int | None) -> dict[str, str] | None:
    return None if version is None else {"If-Match": f'"v{int(version)}"'}


Answer = TypeVar("Answer", bound=BaseModel)


class _Resource:
    def __init__(self, client: RunClient) -> None:
        self._client = client

    async def _answer(
        self, model: type[Answer], method: str, path: str, **options: Unpack[RequestOptions]
    ) -> Answer:
        """The request's answer as the server's ``model`` (``options`` as ``request`` takes)."""
        response = await self._client.request(method, path, **options)
        return model.model_validate(response.json())


Child = TypeVar("Child", bound=BaseModel)


class _WorkflowChildren(_Resource, Generic[Child]):
    """Things kept under a workflow (its webhooks, its schedules): ``_kind`` names them in
    the path, ``_model`` is the server's answer for one."""

    _kind: str
    _model: type[Child]

    def _path(self, workflow_id: str, child_id: str | None = None) -> str:
        path = f"/workflows/{_seg(workflow_id)}/{self._kind}"
        return path if child_id is None else f"{path}/{_seg(child_id)}"

    async def _send(
        self, method: str, workflow_id: str, child_id: str | None, body: Mapping[str, Any]
    ) -> Child:
        return await self._answer(
            self._model, method, self._path(workflow_id, child_id), json=dict(body)
        )

    def list(self, workflow_id: str, *, page_size: int = 50) -> AsyncIterator[Child]:
        return self._client.paginate(self._path(workflow_id), self._model, {"limit": page_size})

    async def _delete(self, workflow_id: str, child_id: str) -> None:
        await self._client.request("DELETE", self._path(workflow_id, child_id))


class AsyncWorkflows(_Resource):
    def list(self, *, page_size: int = 50) -> AsyncIterator[WorkflowSummary]:
        """Every workflow of the account, newest first (pages fetched as needed)."""
        return self._client.paginate("/workflows", WorkflowSummary, {"limit": page_size})

    async def get(self, workflow_id: str) -> WorkflowOut:
        return await self._answer(WorkflowOut, "GET", f"/workflows/{_seg(workflow_id)}")

    async def find(self, id_or_name: str) -> WorkflowOut:
        """A workflow by id, or by its exact name (``AmbiguousWorkflow`` when names repeat)."""
        if looks_like_id(id_or_name):
            return await self.get(id_or_name)
        ids = [w.id async for w in self.list(page_size=200) if w.name == id_or_name]
        if len(ids) > 1:
            raise AmbiguousWorkflow(id_or_name, ids)
        if not ids:
            raise NotFound(
                404, {"code": "not_found", "detail": f"No workflow named {id_or_name!r}."}
            )
        return await self.get(ids[0])

    async def create(
        self, source: WorkflowSource, *, name: str | None = None, message: str | None = None
    ) -> WorkflowOut:
        """Create from a dict or a JSON file path (see ``load_workflow``): its version 1,
        with ``message`` kept beside it."""
        name, graph = load_workflow(source, name)
        body: dict[str, Any] = {"name": name, "graph_json": graph}
        if message is not None:
            body["message"] = message
        return await self._answer(WorkflowOut, "POST", "/workflows", json=body)

    async def update(
        self,
        workflow_id: str,
        *,
        name: str | None = None,
        graph_json: Mapping[str, Any] | None = None,
        message: str | None = None,
        expected_version: int | None = None,
    ) -> WorkflowOut:
        """Change the name, the graph or both (what is not given stays): a new version.
        ``expected_version``: save only if that is still the current version (sent as
        ``If-Match``), else raise ``PreconditionFailed`` and save nothing."""
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if graph_json is not None:
            body["graph_json"] = dict(graph_json)
        if message is not None:
            body["message"] = message
        return await self._answer(
            WorkflowOut,
            "PATCH",
            f"/workflows/{_seg(workflow_id)}",
            json=body,
            headers=_if_match(expected_version),
        )

    def versions(
        self, workflow_id: str, *, page_size: int = 50
    ) -> AsyncIterator[WorkflowVersionSummary]:
        """Every saved version of the workflow, newest first (without their graphs)."""
        return self._client.paginate(
            f"/workflows/{_seg(workflow_id)}/versions",
            WorkflowVersionSummary,
            {"limit": page_size},
        )

    async def version(self, workflow_id: str, number: int) -> WorkflowVersionOut:
        """One version as it was saved, with its graph."""
        return await self._answer(
            WorkflowVersionOut, "GET", f"/workflows/{_seg(workflow_id)}/versions/{int(number)}"
        )

    async def restore(
        self,
        workflow_id: str,
        number: int,
        *,
        message: str | None = None,
        expected_version: int | None = None,
    ) -> WorkflowOut:
        """Save version ``number``'s name and graph again, as a new version; the workflow
        as it now is. ``expected_version`` as in ``update``."""
        body: dict[str, Any] = {} if message is None else {"message": message}
        return await self._answer(
            WorkflowOut,
            "POST",
            f"/workflows/{_seg(workflow_id)}/versions/{int(number)}/restore",
            json=body,
            headers=_if_match(expected_version),
        )

    async def estimate(
        self, workflow_id: str, input: Mapping[str, Any] | None = None, *, cache: bool = True
    ) -> RunEstimate:
        """What executing with this input would hold, per node and in total, and whether
        the balance covers it; nothing runs and nothing is charged."""
        body: dict[str, Any] = {"cache": cache}
        if input is not None:
            body["input"] = dict(input)
        return await self._answer(
            RunEstimate, "POST", f"/workflows/{_seg(workflow_id)}/estimate", json=body
        )

    async def delete(self, workflow_id: str) -> None:
        """Delete; its running runs are cancelled and its webhooks stop at once."""
        await self._client.request("DELETE", f"/workflows/{_seg(workflow_id)}")

    async def execute(
        self,
        workflow_id: str,
        input: Mapping[str, Any] | None = None,
        *,
        cache: bool = True,
        idempotency_key: str | None = None,
        callback_url: str | None = None,
    ) -> AsyncRun:
        """Start a run. Without an ``idempotency_key`` one is made up, so that a retried
        request (429, 503) can never start a second run. ``callback_url``: the run's record
        is POSTed there, signed, when it ends (``client.callbacks``, docs/callbacks.md)."""
        key = idempotency_key or f"client-{uuid.uuid4()}"
        body: dict[str, Any] = {"cache": cache}
        if input is not None:
            body["input"] = dict(input)
        if callback_url is not None:
            body["callback_url"] = callback_url
        response = await self._client.request(
            "POST",
            f"/workflows/{_seg(workflow_id)}/execute",
            json=body,
            headers={"Idempotency-Key": key},
        )
        return await self._client.runs.get(workflow_id, response.json()["run_id"])


class AsyncRuns(_Resource):
    async def get(self, workflow_id: str, run_id: str) -> AsyncRun:
        response = await self._client.request(
            "GET", f"/workflows/{_seg(workflow_id)}/runs/{_seg(run_id)}"
        )
        return AsyncRun.bind(response.json(), self._client)

    def list(
        self, workflow_id: str, *, status: RunStatusName | None = None, page_size: int = 50
    ) -> AsyncIterator[RunSummary]:
        """The workflow's runs, newest first; ``status`` filters."""
        return self._client.paginate(
            f"/workflows/{_seg(workflow_id)}/runs",
            RunSummary,
            {"limit": page_size, "status": status},
        )

    async def cancel(self, workflow_id: str, run_id: str) -> RunSummary:
        """Ask the run to stop; it ends ``failed`` with error code ``cancelled``."""
        return await self._answer(
            RunSummary, "POST", f"/workflows/{_seg(workflow_id)}/runs/{_seg(run_id)}/cancel"
        )

    async def retry(
        self,
        workflow_id: str,
        run_id: str,
        *,
        params: Mapping[str, Mapping[str, Any]] | None = None,
        cache: bool = True,
        idempotency_key: str | None = None,
        current: bool = False,
    ) -> AsyncRun:
        """Retry a failed or cancelled run from where it stopped: a new run (its
        ``retried_from`` is ``run_id``) that reuses every completed node's output, uncharged,
        and runs the rest. ``params`` gives nodes new params (node id -> params merged into
        theirs); such a node runs again, with every node after it. ``current`` runs the
        workflow as saved now instead of the run's own graph (a fix saved since); nodes
        edited since run again. As with ``execute``, an ``idempotency_key`` is made up when
        none is given. Raises ``Conflict`` while the run is running or when it completed."""
        key = idempotency_key or f"client-{uuid.uuid4()}"
        body: dict[str, Any] = {"cache": cache}
        if current:
            body["graph"] = "current"
        if params is not None:
            body["params"] = {node: dict(values) for node, values in params.items()}
        response = await self._client.request(
            "POST",
            f"/workflows/{_seg(workflow_id)}/runs/{_seg(run_id)}/retry",
            json=body,
            headers={"Idempotency-Key": key},
        )
        return await self.get(workflow_id, response.json()["run_id"])

    async def events(
        self, workflow_id: str, run_id: str, *, after_seq: int = 0
    ) -> AsyncIterator[RunEvent]:
        """The run's events (Server-Sent Events): the past ones, then live ones until the run
        ends."""
        path = f"/workflows/{_seg(workflow_id)}/runs/{_seg(run_id)}/events"
        async with self._client.stream(
            "GET", path, params={"after_seq": after_seq or None}
        ) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    yield RunEvent.model_validate_json(line[5:].strip())


class AsyncArtifacts(_Resource):
    async def metadata(self, artifact_id: str) -> ArtifactMetadata:
        """Content type, size, sha256, dimensions or duration, and a signed download URL."""
        return await self._answer(
            ArtifactMetadata, "GET", f"/artifacts/{_seg(artifact_id)}/metadata"
        )

    async def read(self, artifact_id: str) -> bytes:
        """The artifact's bytes, in memory."""
        return (await self._client.request("GET", f"/artifacts/{_seg(artifact_id)}")).content

    async def download(self, artifact_id: str, to: str | os.PathLike[str]) -> Path:
        """Stream the artifact into the file ``to`` (or into ``<to>/<id>.<ext>`` when ``to``
        is a directory, or ends with a slash). The file appears complete or not at all."""
        target = anyio.Path(to)
        into_directory = str(to).endswith(("/", os.sep))
        async with self._client.stream("GET", f"/artifacts/{_seg(artifact_id)}") as response:
            if into_directory or await target.is_dir():
                content_type = response.headers.get("content-type", "")
                target = target / f"{artifact_id}{extension_for(content_type)}"
            await target.parent.mkdir(parents=True, exist_ok=True)
            # A new name in the same directory ("x": never an existing file), created with the
            # user's umask like any download, renamed over the target when complete.
            tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.part"
            try:
                async with await anyio.open_file(tmp, "xb") as handle:
                    async for chunk in response.aiter_bytes():
                        await handle.write(chunk)
                await tmp.replace(target)
            except BaseException:
                with contextlib.suppress(OSError):
                    await tmp.unlink()
                raise
        return Path(target)


class AsyncAssets(_Resource):
    """Files of the account (docs/media-inputs.md): uploaded, listed, renamed, deleted."""

    async def upload(
        self,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        on_progress: Callable[[int], None] | None = None,
        resumable: bool | None = None,
    ) -> AssetOut:
        """Upload the file at ``path``, streamed from disk (never read whole);
        ``on_progress`` is told the bytes sent so far. The same content uploaded before
        answers the asset the account already has. Files above 8 MiB (or any, with
        ``resumable=True``) go in a resumable upload (tus): a lost connection or a busy
        server costs only the bytes not yet stored, sent again from where they stopped."""
        source = Path(path)
        if not await anyio.Path(source).is_file():
            raise FileNotFoundError(f"no file {source}")
        if resumable is None:
            resumable = (await anyio.Path(source).stat()).st_size > RESUMABLE_ABOVE
        if resumable:
            asset_id = await upload_resumable(
                self._client, source, name or source.name, on_progress
            )
            return await self.get(asset_id)

        async def chunks() -> AsyncIterator[bytes]:
            sent = 0
            async with await anyio.open_file(source, "rb") as handle:
                while chunk := await handle.read(UPLOAD_CHUNK):
                    yield chunk
                    sent += len(chunk)
                    if on_progress is not None:
                        on_progress(sent)

        return await self._answer(
            AssetOut,
            "POST",
            "/uploads",
            params={"name": name or source.name},
            content=chunks,
            headers={"Content-Type": "application/octet-stream"},
        )

    def list(
        self, *, kind: str | None = None, search: str | None = None, page_size: int = 50
    ) -> AsyncIterator[AssetOut]:
        """Newest first; ``kind`` (image, audio, video) filters, ``search`` matches a part of
        the name or a tag."""
        query = {"limit": page_size, "kind": kind, "q": search}
        return self._client.paginate("/assets", AssetOut, query)

    async def get(self, asset_id: str) -> AssetOut:
        return await self._answer(AssetOut, "GET", f"/assets/{_seg(asset_id)}")

    async def update(
        self, asset_id: str, *, name: str | None = None, tags: builtins.list[str] | None = None
    ) -> AssetOut:
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if tags is not None:
            body["tags"] = tags
        return await self._answer(AssetOut, "PATCH", f"/assets/{_seg(asset_id)}", json=body)

    async def delete(self, asset_id: str, *, force: bool = False) -> None:
        """Delete; refused (``AssetInUse``) while a workflow names it, unless ``force``."""
        params = {"force": "true"} if force else None
        await self._client.request("DELETE", f"/assets/{_seg(asset_id)}", params=params)


class AsyncWebhooks(_WorkflowChildren[WebhookOut]):
    _kind, _model = "webhooks", WebhookOut

    async def create(
        self,
        workflow_id: str,
        name: str,
        *,
        active: bool = True,
        secret: str | None = None,
        callback_url: str | None = None,
    ) -> WebhookOut:
        """A trigger URL for the workflow; ``secret`` makes triggers carry a signature;
        ``callback_url`` makes the runs it starts call back when they end."""
        body: dict[str, Any] = {"name": name, "active": active}
        if secret is not None:
            body["secret"] = secret
        if callback_url is not None:
            body["callback_url"] = callback_url
        return await self._send("POST", workflow_id, None, body)

    async def update(
        self,
        workflow_id: str,
        webhook_id: str,
        *,
        name: str | None = None,
        active: bool | None = None,
    ) -> WebhookOut:
        body = {k: v for k, v in (("name", name), ("active", active)) if v is not None}
        return await self._send("PATCH", workflow_id, webhook_id, body)

    async def set_active(self, workflow_id: str, webhook_id: str, active: bool) -> WebhookOut:
        """Switch a webhook on or off; an inactive one answers 403 webhook_inactive."""
        return await self.update(workflow_id, webhook_id, active=active)

    async def delete(self, workflow_id: str, webhook_id: str) -> None:
        await self._delete(workflow_id, webhook_id)


class AsyncSchedules(_WorkflowChildren[ScheduleOut]):
    """Cron triggers of a workflow (docs/schedules.md)."""

    _kind, _model = "schedules", ScheduleOut

    async def create(
        self,
        workflow_id: str,
        name: str,
        cron: str,
        *,
        timezone: str = "UTC",
        input: Mapping[str, Any] | None = None,
        active: bool = True,
        callback_url: str | None = None,
    ) -> ScheduleOut:
        body: dict[str, Any] = {"name": name, "cron": cron, "timezone": timezone, "active": active}
        if input is not None:
            body["input"] = dict(input)
        if callback_url is not None:
            body["callback_url"] = callback_url
        return await self._send("POST", workflow_id, None, body)

    async def get(self, workflow_id: str, schedule_id: str) -> ScheduleOut:
        return await self._answer(ScheduleOut, "GET", self._path(workflow_id, schedule_id))

    async def update(self, workflow_id: str, schedule_id: str, **changes: Any) -> ScheduleOut:
        """Change ``name``, ``cron``, ``timezone``, ``input``, ``active`` or
        ``callback_url`` (None removes ``input`` / ``callback_url``)."""
        return await self._send("PATCH", workflow_id, schedule_id, changes)

    async def set_active(self, workflow_id: str, schedule_id: str, active: bool) -> ScheduleOut:
        """Pause (False) or resume (True); resuming fires next at the next future time."""
        return await self.update(workflow_id, schedule_id, active=active)

    async def delete(self, workflow_id: str, schedule_id: str) -> None:
        await self._delete(workflow_id, schedule_id)


class AsyncApprovals(_Resource):
    """Approval nodes waiting for a person (docs/approvals.md)."""

    async def list(self) -> ApprovalList:
        """The account's pending approvals, oldest first (``count``: all of them)."""
        return await self._answer(ApprovalList, "GET", "/approvals")

    async def get(self, approval_id: str) -> ApprovalOut:
        return await self._answer(ApprovalOut, "GET", f"/approvals/{_seg(approval_id)}")

    async def approve(
        self, approval_id: str, *, comment: str | None = None, text: str | None = None
    ) -> ApprovalOut:
        """Approve; ``text`` replaces the input (only where the node allows editing)."""
        return await self._decide(approval_id, "approve", comment, text)

    async def reject(self, approval_id: str, *, comment: str | None = None) -> ApprovalOut:
        return await self._decide(approval_id, "reject", comment, None)

    async def _decide(
        self, approval_id: str, action: str, comment: str | None, text: str | None
    ) -> ApprovalOut:
        body = {k: v for k, v in {"comment": comment, "text": text}.items() if v is not None}
        return await self._answer(
            ApprovalOut, "POST", f"/approvals/{_seg(approval_id)}/{action}", json=body
        )


class AsyncCallbacks(_Resource):
    """Run callbacks: the account's signing secret and a run's delivery log
    (docs/callbacks.md)."""

    async def rotate_secret(self) -> CallbackSecretCreated:
        """Create the signing secret, or replace it; the value is in this answer only."""
        return await self._answer(CallbackSecretCreated, "POST", "/callbacks/secret")

    async def secret_info(self) -> CallbackSecretInfo:
        return await self._answer(CallbackSecretInfo, "GET", "/callbacks/secret")

    async def deliveries(self, workflow_id: str, run_id: str) -> builtins.list[CallbackDeliveryOut]:
        response = await self._client.request(
            "GET", f"/workflows/{_seg(workflow_id)}/runs/{_seg(run_id)}/callbacks"
        )
        return [CallbackDeliveryOut.model_validate(d) for d in response.json()]


class AsyncKeys(_Resource):
    """API keys. The server takes a JWT here only (``JwtRequired`` with an API key): use
    ``AsyncClient.login`` or the token ``nodeloom login`` stored."""

    async def create(self, name: str) -> ApiKeyCreated:
        """A new key; ``.key`` is shown in this answer only."""
        return await self._answer(ApiKeyCreated, "POST", "/api-keys", json={"name": name})

    async def list(self) -> builtins.list[ApiKeyOut]:
        response = await self._client.request("GET", "/api-keys")
        return [ApiKeyOut.model_validate(item) for item in response.json()]

    async def revoke(self, key_id: str) -> None:
        """Revoke at once: the very next request with the key gets 401."""
        await self._client.request("DELETE", f"/api-keys/{_seg(key_id)}")


class AsyncCredentials(_Resource):
    """Provider credentials of the account (docs/providers.md). Answers never carry the
    secret: ``hint`` is its masked form, ``fields`` the non-secret fields."""

    async def create(self, name: str, kind: str, fields: Mapping[str, Any]) -> CredentialOut:
        return await self._answer(
            CredentialOut,
            "POST",
            "/credentials",
            json={"name": name, "kind": kind, "fields": dict(fields)},
        )

    def list(self, *, page_size: int = 50) -> AsyncIterator[CredentialOut]:
        """Every credential of the account, newest first (pages fetched as needed)."""
        return self._client.paginate("/credentials", CredentialOut, {"limit": page_size})

    async def get(self, credential_id: str) -> CredentialOut:
        return await self._answer(CredentialOut, "GET", f"/credentials/{_seg(credential_id)}")

    async def update(
        self,
        credential_id: str,
        *,
        name: str | None = None,
        fields: Mapping[str, Any] | None = None,
    ) -> CredentialOut:
        """Rename, or change fields: a secret field given replaces the stored secret (the
        next run uses it); non-secret fields given replace theirs, the others are kept."""
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if fields is not None:
            body["fields"] = dict(fields)
        return await self._answer(
            CredentialOut, "PATCH", f"/credentials/{_seg(credential_id)}", json=body
        )

    async def delete(self, credential_id: str) -> None:
        """Delete at once; workflows naming it are refused at execute until changed."""
        await self._client.request("DELETE", f"/credentials/{_seg(credential_id)}")

    async def test(self, credential_id: str) -> CredentialTestResult:
        """Whether the provider accepts it (openai: ``GET {base_url}/models``)."""
        return await self._answer(
            CredentialTestResult, "POST", f"/credentials/{_seg(credential_id)}/test"
        )

    async def model_schema(self, credential_id: str, model: str) -> ModelSchemaOut:
        """The input (and output) JSON schema the provider publishes for ``model``, read with
        this credential: a replicate one for ``owner/name`` or ``owner/name:version``, a fal
        one for an endpoint id (``fal-ai/flux/dev``). ``NotFound`` for a model the provider
        does not know, ``ProviderError`` when it refuses."""
        return await self._answer(
            ModelSchemaOut,
            "GET",
            f"/credentials/{_seg(credential_id)}/model-schema",
            params={"model": model},
        )

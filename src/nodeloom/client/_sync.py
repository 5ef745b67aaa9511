"""The blocking client: ``AsyncClient`` run on a private event loop in a daemon thread.

Why not a second, httpx.Client-based copy of every method: the two would drift, and waiting
for a run (a WebSocket plus a polling fallback) is async code by nature. Each blocking method
is the async one, wrapped once with its signature kept (``ParamSpec``), so type checkers and
``help()`` see the same parameters. Callbacks (``on_event``) and iterators run in the
caller's thread, never on the private loop.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, Unpack

from pydantic import PrivateAttr

from nodeloom.client._core import AsyncClient, ClientOptions
from nodeloom.client._resources import (
    AsyncApprovals,
    AsyncArtifacts,
    AsyncAssets,
    AsyncCallbacks,
    AsyncCredentials,
    AsyncKeys,
    AsyncRuns,
    AsyncSchedules,
    AsyncWebhooks,
    AsyncWorkflows,
)
from nodeloom.client._runs import AsyncRun, OnEvent, RunEvent
from nodeloom.client.errors import RunFailed
from nodeloom.schemas.runs import ArtifactMetadata, RunOut, RunSummary

P = ParamSpec("P")
T = TypeVar("T")
U = TypeVar("U")


class _Loop:
    """An event loop in a daemon thread that blocking callers hand coroutines to.

    The thread owns the loop from start to end: when the loop stops, the thread itself closes
    the client's connections and the loop. Stopping is the only thing done from outside, and
    it never blocks, because it may happen in a garbage collection, in any thread, at any
    moment (``Client(...).me()`` drops the ``Client`` at once; every blocking method and every
    ``Run`` holds this object, so the loop lives as long as any of them can still be called).
    """

    def __init__(self, inner: AsyncClient | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=_serve, args=(self.loop, inner), name="nodeloom-client", daemon=True
        )
        self.thread.start()
        self._finalizer = weakref.finalize(self, _stop_soon, self.loop)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self.closed or threading.current_thread() is self.thread:
            coro.close()
            if self.closed:
                raise RuntimeError("the client is closed")
            raise RuntimeError("a blocking Client method was called from its own event loop")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt while waiting: stop the work too
            raise

    def blocking(self, fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            return self.run(fn(*args, **kwargs))

        return call

    def converting(
        self, fn: Callable[P, Coroutine[Any, Any, T]], convert: Callable[[T], U]
    ) -> Callable[P, U]:
        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> U:
            return convert(self.run(fn(*args, **kwargs)))

        return call

    def iterating(self, fn: Callable[P, AsyncIterator[T]]) -> Callable[P, Iterator[T]]:
        @functools.wraps(fn)
        def iterate(*args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
            source = fn(*args, **kwargs)

            async def next_item() -> T:
                return await anext(source)

            try:
                while True:
                    try:
                        item = self.run(next_item())
                    except StopAsyncIteration:
                        return
                    yield item
            finally:
                # Left early (break, or dropped): close the source on its loop, without
                # waiting, since this may run in a garbage collection.
                aclose = getattr(source, "aclose", None)
                if aclose is not None and not self.closed:
                    asyncio.run_coroutine_threadsafe(aclose(), self.loop)

        return iterate

    def close(self) -> None:
        """Close the client's connections and stop the thread (once; later calls do nothing)."""
        self._finalizer()
        if threading.current_thread() is not self.thread:
            self.thread.join()


def _serve(loop: asyncio.AbstractEventLoop, inner: AsyncClient | None) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        try:
            if inner is not None:
                loop.run_until_complete(inner.aclose())
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def _stop_soon(loop: asyncio.AbstractEventLoop) -> None:
    with contextlib.suppress(RuntimeError):  # already closed
        loop.call_soon_threadsafe(loop.stop)


class Run(RunOut):
    """A run (every field of ``GET /workflows/{id}/runs/{run_id}``) with blocking methods;
    see ``AsyncRun`` for what each does."""

    _async: AsyncRun = PrivateAttr()
    _runner: _Loop = PrivateAttr()

    @classmethod
    def _wrap(cls, inner: AsyncRun, loop: _Loop) -> Run:
        run = cls.model_construct(**dict(inner))
        run._async, run._runner = inner, loop
        return run

    @property
    def done(self) -> bool:
        return self.status != "running"

    def refresh(self) -> Run:
        return Run._wrap(self._runner.run(self._async.refresh()), self._runner)

    def cancel(self) -> RunSummary:
        return self._runner.run(self._async.cancel())

    def retry(
        self,
        *,
        params: dict[str, dict[str, Any]] | None = None,
        cache: bool = True,
        current: bool = False,
    ) -> Run:
        """Retry this failed or cancelled run from where it stopped (``runs.retry``)."""
        retried = self._async.retry(params=params, cache=cache, current=current)
        return Run._wrap(self._runner.run(retried), self._runner)

    def follow(
        self,
        timeout: float | None = None,
        *,
        use_websocket: bool = True,
        poll_interval: float = 0.5,
    ) -> Iterator[RunEvent]:
        return self._runner.iterating(self._async.follow)(
            timeout, use_websocket=use_websocket, poll_interval=poll_interval
        )

    def wait(
        self,
        timeout: float | None = None,
        on_event: OnEvent | None = None,
        *,
        use_websocket: bool = True,
        poll_interval: float = 0.5,
    ) -> Run:
        """Block until the run ends and return it as it ended; ``on_event`` is called (in this
        thread) with each event. Raises ``WaitTimeout`` after ``timeout`` seconds."""
        for event in self.follow(timeout, use_websocket=use_websocket, poll_interval=poll_interval):
            if on_event is not None:
                on_event(event)
        return self.refresh()

    def output_node_ids(self, *, all_nodes: bool = False) -> list[str]:
        return self._runner.run(self._async.output_node_ids(all_nodes=all_nodes))

    def outputs(self, *, all_nodes: bool = False) -> dict[str, ArtifactMetadata]:
        return self._runner.run(self._async.outputs(all_nodes=all_nodes))

    def download(self, directory: str | Path, *, all_nodes: bool = False) -> dict[str, Path]:
        return self._runner.run(self._async.download(directory, all_nodes=all_nodes))


class Workflows:
    def __init__(self, inner: AsyncWorkflows, loop: _Loop) -> None:
        self.list = loop.iterating(inner.list)
        self.get = loop.blocking(inner.get)
        self.find = loop.blocking(inner.find)
        self.create = loop.blocking(inner.create)
        self.update = loop.blocking(inner.update)
        self.delete = loop.blocking(inner.delete)
        self.execute = loop.converting(inner.execute, lambda run: Run._wrap(run, loop))
        self.versions = loop.iterating(inner.versions)
        self.version = loop.blocking(inner.version)
        self.restore = loop.blocking(inner.restore)
        self.estimate = loop.blocking(inner.estimate)


class Runs:
    def __init__(self, inner: AsyncRuns, loop: _Loop) -> None:
        self.get = loop.converting(inner.get, lambda run: Run._wrap(run, loop))
        self.list = loop.iterating(inner.list)
        self.cancel = loop.blocking(inner.cancel)
        self.retry = loop.converting(inner.retry, lambda run: Run._wrap(run, loop))
        self.events = loop.iterating(inner.events)


class Artifacts:
    def __init__(self, inner: AsyncArtifacts, loop: _Loop) -> None:
        self.metadata = loop.blocking(inner.metadata)
        self.read = loop.blocking(inner.read)
        self.download = loop.blocking(inner.download)


class Assets:
    def __init__(self, inner: AsyncAssets, loop: _Loop) -> None:
        self.upload = loop.blocking(inner.upload)
        self.list = loop.iterating(inner.list)
        self.get = loop.blocking(inner.get)
        self.update = loop.blocking(inner.update)
        self.delete = loop.blocking(inner.delete)


class Webhooks:
    def __init__(self, inner: AsyncWebhooks, loop: _Loop) -> None:
        self.create = loop.blocking(inner.create)
        self.list = loop.iterating(inner.list)
        self.update = loop.blocking(inner.update)
        self.set_active = loop.blocking(inner.set_active)
        self.delete = loop.blocking(inner.delete)


class Schedules:
    def __init__(self, inner: AsyncSchedules, loop: _Loop) -> None:
        self.create = loop.blocking(inner.create)
        self.list = loop.iterating(inner.list)
        self.get = loop.blocking(inner.get)
        self.update = loop.blocking(inner.update)
        self.set_active = loop.blocking(inner.set_active)
        self.delete = loop.blocking(inner.delete)


class Approvals:
    def __init__(self, inner: AsyncApprovals, loop: _Loop) -> None:
        self.list = loop.blocking(inner.list)
        self.get = loop.blocking(inner.get)
        self.approve = loop.blocking(inner.approve)
        self.reject = loop.blocking(inner.reject)


class Callbacks:
    def __init__(self, inner: AsyncCallbacks, loop: _Loop) -> None:
        self.rotate_secret = loop.blocking(inner.rotate_secret)
        self.secret_info = loop.blocking(inner.secret_info)
        self.deliveries = loop.blocking(inner.deliveries)


class Keys:
    def __init__(self, inner: AsyncKeys, loop: _Loop) -> None:
        self.create = loop.blocking(inner.create)
        self.list = loop.blocking(inner.list)
        self.revoke = loop.blocking(inner.revoke)


class Credentials:
    def __init__(self, inner: AsyncCredentials, loop: _Loop) -> None:
        self.create = loop.blocking(inner.create)
        self.list = loop.iterating(inner.list)
        self.get = loop.blocking(inner.get)
        self.update = loop.blocking(inner.update)
        self.delete = loop.blocking(inner.delete)
        self.test = loop.blocking(inner.test)
        self.model_schema = loop.blocking(inner.model_schema)


class Client:
    """A blocking Nodeloom client: the same methods as ``AsyncClient``, without ``await``.

    ``url`` and ``api_key`` default to ``NODELOOM_URL`` / ``NODELOOM_API_KEY``, then to what
    ``nodeloom login`` stored. Close it (or use ``with``) to stop its background thread.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        **options: Unpack[ClientOptions],
    ) -> None:
        self._async = inner = AsyncClient(url, api_key, **options)
        self._loop = loop = _Loop(inner)
        self.base_url = inner.base_url
        self.credential = inner.credential
        self.credential_source = inner.credential_source
        self.token_expires_at: float | None = None
        self.workflows = Workflows(inner.workflows, loop)
        self.runs = Runs(inner.runs, loop)
        self.artifacts = Artifacts(inner.artifacts, loop)
        self.assets = Assets(inner.assets, loop)
        self.webhooks = Webhooks(inner.webhooks, loop)
        self.schedules = Schedules(inner.schedules, loop)
        self.callbacks = Callbacks(inner.callbacks, loop)
        self.approvals = Approvals(inner.approvals, loop)
        self.keys = Keys(inner.keys, loop)
        self.credentials = Credentials(inner.credentials, loop)
        self.me = loop.blocking(inner.me)
        self.node_types = loop.blocking(inner.node_types)
        self.request = loop.blocking(inner.request)  # any other call: /api/v1 + path

    @classmethod
    def login(
        cls, url: str | None, email: str, password: str, **options: Unpack[ClientOptions]
    ) -> Client:
        """A client authenticated with a fresh JWT (what API-key management needs)."""
        loop = _Loop()
        try:
            token_client = loop.run(AsyncClient.login(url, email, password))
            loop.run(token_client.aclose())
        finally:
            loop.close()
        client = cls(token_client.base_url, token_client.credential, **options)
        client.token_expires_at = token_client.token_expires_at
        return client

    def close(self) -> None:
        self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_default_clients: dict[tuple[str | None, str | None], Client] = {}
_default_lock = threading.Lock()


def _client_for(url: str | None, api_key: str | None) -> Client:
    with _default_lock:
        client = _default_clients.get((url, api_key))
        if client is None:
            client = _default_clients[(url, api_key)] = Client(url, api_key)
        return client


@atexit.register
def _close_default_clients() -> None:
    with _default_lock:
        for client in _default_clients.values():
            client.close()
        _default_clients.clear()


def run(
    workflow: str,
    input: dict[str, Any] | None = None,
    *,
    url: str | None = None,
    api_key: str | None = None,
    timeout: float | None = None,
    on_event: OnEvent | None = None,
    cache: bool = True,
) -> Run:
    """Run a workflow (by id or exact name) with ``input`` and wait for it to end.

    Returns the completed run (``run.outputs()``, ``run.download(dir)``); raises ``RunFailed``
    when it fails and ``WaitTimeout`` after ``timeout`` seconds. Uses a shared ``Client`` for
    ``url`` / ``api_key`` (default: the environment, then ``nodeloom login``).
    """
    client = _client_for(url, api_key)
    found = client.workflows.find(workflow)
    finished = client.workflows.execute(found.id, input, cache=cache).wait(
        timeout, on_event=on_event
    )
    if finished.status == "failed":
        raise RunFailed(finished)
    return finished

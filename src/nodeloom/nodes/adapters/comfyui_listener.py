"""One WebSocket per fleet server, shared by every prompt this process has on it.

ComfyUI sends a prompt's messages (``executing``, ``progress``, ``execution_success``...)
to the WebSocket of the ``client_id`` it was queued with, each naming its ``prompt_id``.
A fleet queues all its prompts on a server under one client id, so one connection, opened
once and kept, carries them all and is routed here by ``prompt_id``: a prompt taking a slot
only subscribes (no WebSocket handshake between a slot freeing and the POST). A message
without a ``prompt_id`` (an older server's ``progress``) goes to the prompt the server last
said it was executing. When the connection drops, every subscription ends (the prompt then
asks the server's history, which finds a dead server at once) and the next subscription
opens a new connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import websockets

from nodeloom.nodes.adapters.comfyui_protocol import ComfyUIClient
from nodeloom.sdk._node import NodeFailure

_CLOSED = object()  # put on a subscription when the connection ends


class Subscription:
    """One prompt's messages on the shared connection: ``recv()`` as a WebSocket's (raw
    text), ``websockets.ConnectionClosed`` once the connection is gone."""

    def __init__(self, listener: Listener, prompt_id: str) -> None:
        self.listener, self.prompt_id = listener, prompt_id
        self.messages: asyncio.Queue[Any] = asyncio.Queue()

    async def recv(self) -> Any:
        raw = await self.messages.get()
        if raw is _CLOSED:
            self.messages.put_nowait(_CLOSED)  # every later recv says so too
            raise websockets.ConnectionClosed(None, None)
        return raw

    def close(self) -> None:
        self.listener.unsubscribe(self)


class Listener:
    """The shared connection of one server (``client_id`` is this process's for it)."""

    def __init__(self, client: Callable[[], Awaitable[ComfyUIClient]]) -> None:
        self._client = client
        self.client_id = f"nodeloom-fleet-{uuid.uuid4().hex}"
        self._subscribers: dict[str, Subscription] = {}
        self._current: str | None = None  # the prompt the server last said it executes
        self._reader: asyncio.Task[None] | None = None
        self._opening = asyncio.Lock()

    async def subscribe(self, prompt_id: str) -> Subscription | None:
        """A subscription to ``prompt_id``'s messages, the connection opened if it is not;
        None when the server refuses or does not answer the WebSocket (the prompt polls)."""
        async with self._opening:
            if self._reader is None or self._reader.done():
                connected: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
                self._reader = asyncio.ensure_future(self._read(connected))
                if not await connected:
                    return None
        subscription = Subscription(self, prompt_id)
        self._subscribers[prompt_id] = subscription
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        if self._subscribers.get(subscription.prompt_id) is subscription:
            del self._subscribers[subscription.prompt_id]

    async def _read(self, connected: asyncio.Future[bool]) -> None:
        try:
            with contextlib.suppress(
                OSError, websockets.WebSocketException, TimeoutError, NodeFailure
            ):
                client = await self._client()
                async with client.websocket(self.client_id) as ws:
                    connected.set_result(True)
                    async for raw in ws:
                        self._route(raw)
        finally:
            if not connected.done():
                connected.set_result(False)  # refused or not answering: the prompt polls
            for subscription in list(self._subscribers.values()):
                subscription.messages.put_nowait(_CLOSED)
            self._subscribers.clear()
            self._current = None

    def _route(self, raw: Any) -> None:
        if not isinstance(raw, str):
            return  # a binary preview
        try:
            message = json.loads(raw)
        except ValueError:
            return
        data = message.get("data") if isinstance(message, dict) else None
        if not isinstance(data, dict):
            return
        prompt_id = data.get("prompt_id")
        if isinstance(prompt_id, str):
            if message.get("type") in ("execution_start", "executing"):
                self._current = prompt_id
        else:
            prompt_id = self._current
        subscription = self._subscribers.get(prompt_id) if prompt_id else None
        if subscription is not None:
            subscription.messages.put_nowait(raw)

    async def close(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

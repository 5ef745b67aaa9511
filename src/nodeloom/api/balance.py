"""Keeping the connections of ``serve --processes N`` spread over the processes.

The children accept from one shared listening socket (api/processes.py), and the first to
wake takes every connection waiting: a client opening 50 keep-alive connections at once
found 35 on one process and 15 on the other, and they stayed there, one core overloaded
while the other idled (throughput ~40% lower, p99 latency doubled).

So each child publishes how many connections it holds, every ``PUBLISH_SECONDS``, in a
small array of shared memory the supervisor made; a child holding more than its share
(the total divided by N, plus ``SLACK``) answers some responses with ``Connection: close``,
one per connection too many. The clients connect again, and the idlest child, the first to
accept, most likely takes them. HTTP/1.1 clients reconnect on their own after such an
answer; nothing is lost, only a TCP handshake on 127.0.0.1 or the LAN.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, MutableSequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

PUBLISH_SECONDS = 0.1
SLACK = 1


class ConnectionShare:
    """This child's view of the connections of all: ``counts[i]`` is child i's (written by
    it alone, read by all; a stale read only delays a correction by one period)."""

    def __init__(self, counts: MutableSequence[int], index: int) -> None:
        self.counts = counts
        self.index = index
        self.surplus = 0  # connections this child should still let go

    def publish(self, held: int) -> None:
        self.counts[self.index] = held
        total = sum(self.counts)
        fair = math.ceil(total / len(self.counts))
        self.surplus = max(0, held - fair - SLACK)

    def let_go(self) -> bool:
        """Whether the response being sent should close its connection."""
        if self.surplus <= 0:
            return False
        self.surplus -= 1
        return True

    async def publish_forever(self, held: Callable[[], int]) -> None:
        while True:
            self.publish(held())
            await asyncio.sleep(PUBLISH_SECONDS)


class CloseSurplusConnections:
    """Adds ``Connection: close`` to responses while this child holds more than its share."""

    def __init__(self, app: ASGIApp, share: ConnectionShare) -> None:
        self.app = app
        self.share = share

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        share = self.share

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and share.let_go():
                headers = [*message.get("headers", ()), (b"connection", b"close")]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_closing)

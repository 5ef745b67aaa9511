"""Real-time run events: WebSocket and Server-Sent Events."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["events"])

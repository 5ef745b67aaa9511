"""Webhook triggers: management under a workflow, and the public trigger endpoint."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["webhooks"])

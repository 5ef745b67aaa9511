"""An API replica (``nodeloom serve --no-worker`` on PostgreSQL) stops cleanly on SIGTERM:
it runs no queue worker, and its shutdown still closes everything it opened."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import TEST_SECRET
from tests.server import ServerProcess
from tests.topology.fleet import OPEN_LIMITS, postgres_database

pytestmark = pytest.mark.slow


def test_an_api_replica_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    with postgres_database() as url:
        env = {**OPEN_LIMITS, "NODELOOM_DATABASE_URL": url, "NODELOOM_SECRET_KEY": TEST_SECRET}
        api = ServerProcess(tmp_path / "api", env, args=["--no-worker"])
        try:
            api.start()
            assert httpx.get(f"{api.base_url}/healthz", timeout=5).status_code == 200
            assert api.proc is not None
            api.proc.send_signal(signal.SIGTERM)
            code = api.proc.wait(30)
            time.sleep(0.1)  # the log file is flushed by the exiting process
            log = api.log_path.read_text(errors="replace")
            # uvicorn ends by the signal it handled, once its shutdown is over.
            assert code in (0, -signal.SIGTERM), log
            assert "Application shutdown complete" in log, log
            assert "Traceback" not in log, log
        finally:
            api.stop()

"""What an embedded server (SQLite, no Redis) loads when it starts: a server process start is
paid by every `make run`, every replica and every server the tests start, so the libraries of
the scale-out path (redis-py, Procrastinate, psycopg) are imported only where they are used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCALE_OUT_LIBRARIES = ("redis", "procrastinate", "psycopg", "psycopg_pool")

# Builds the app and runs its lifespan (start, then stop) on a migrated SQLite database,
# as `nodeloom serve` does, and prints which of the libraries were imported.
_PROBE = """
import asyncio, sys
from nodeloom.api.app import create_app
from nodeloom.db.migrate import upgrade
from nodeloom.settings import Settings

settings = Settings(data_dir=sys.argv[1], secret_key="s" * 32).prepare()
upgrade(settings.effective_database_url)


async def start_and_stop() -> None:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        pass


asyncio.run(start_and_stop())
print([name for name in {libraries!r} if name in sys.modules])
"""


def test_an_embedded_server_starts_without_the_scale_out_libraries(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODELOOM_")}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(libraries=SCALE_OUT_LIBRARIES), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout

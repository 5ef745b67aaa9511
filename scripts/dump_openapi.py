"""Print the API's OpenAPI document (the web app's types are generated from it).

Used by scripts/build_web.sh; needs no database and no running server."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from nodeloom.api.app import create_app
from nodeloom.settings import Settings


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), secret_key="openapi-dump-" + "x" * 40).prepare()  # type: ignore[arg-type]
        document = create_app(settings).openapi()
    json.dump(document, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

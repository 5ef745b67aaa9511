#!/usr/bin/env bash
# Build web/ into src/nodeloom/web_dist with the machine's Node.js and npm (make install runs
# this when the bundle is missing or older than its sources). Without Node.js the API still
# runs and "/" says how to get the web app, so a missing node is a note, not a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "note: Node.js and npm were not found, so the web app is not built; the API runs" >&2
  echo "      without it. Install Node.js 20 or newer and run 'make install' again." >&2
  exit 0
fi
cd web
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
# The data layer's types are generated from the server's own OpenAPI document.
../.venv/bin/python ../scripts/dump_openapi.py > openapi.json
npm run --silent build

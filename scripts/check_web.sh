#!/usr/bin/env bash
# The web app's own checks (ESLint, Prettier, TypeScript, Vitest), run by make check / make test.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1; then
  if [ "${NODELOOM_REQUIRE_SERVICES:-}" = "1" ]; then
    echo "error: npm is required for the web app's checks; install Node.js 20 or newer" >&2
    exit 1
  fi
  echo "note: npm not found: the web app's checks are skipped" >&2
  exit 0
fi
cd web
npm run --silent lint
npm run --silent typecheck >/dev/null
npm test --silent

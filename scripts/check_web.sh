#!/usr/bin/env bash
# The web app's own checks (ESLint, Prettier, TypeScript, Vitest), run by make check / make test.
# With an argument, one of them: lint (ESLint, Prettier), types (TypeScript) or tests (Vitest);
# make check runs the three side by side with the Python checks.
# Without npm they cannot run: in CI (CI set, or NODELOOM_REQUIRE_SERVICES=1) that is a failure,
# so a runner without Node.js never reports a green web app it did not check; elsewhere it is
# a note that names what was skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1; then
  ci="${CI:-}"
  if [ "${NODELOOM_REQUIRE_SERVICES:-}" = "1" ] || { [ -n "$ci" ] && [ "$ci" != "0" ] && [ "$ci" != "false" ]; }; then
    echo "error: npm is required for the web app's checks in CI (CI=${ci:-unset}," \
      "NODELOOM_REQUIRE_SERVICES=${NODELOOM_REQUIRE_SERVICES:-unset}); install Node.js 20 or newer" >&2
    exit 1
  fi
  echo "note: npm not found: the web app's checks were SKIPPED (ESLint, Prettier, TypeScript," \
    "Vitest component and unit tests); install Node.js 20 or newer to run them" >&2
  exit 0
fi
part="${1:-all}"
case "$part" in
  all | lint | types | tests) ;;
  *)
    echo "usage: scripts/check_web.sh [lint|types|tests]" >&2
    exit 2
    ;;
esac
cd web
if [ "$part" = all ] || [ "$part" = lint ]; then npm run --silent lint; fi
if [ "$part" = all ] || [ "$part" = types ]; then npm run --silent typecheck >/dev/null; fi
if [ "$part" = all ] || [ "$part" = tests ]; then npm test --silent; fi

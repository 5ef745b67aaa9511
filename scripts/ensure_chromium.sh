#!/usr/bin/env bash
# The browser tests drive Debian's Chromium (Playwright cannot download its own browser here).
# Install it when it is missing and we can (root with apt-get); otherwise say what to install.
set -uo pipefail
if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for the browser tests (apt-get install chromium)" >&2
  if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; then
    exit 0
  fi
  echo "warning: apt-get could not install chromium" >&2
fi
echo "note: Chromium is not installed, so the browser tests cannot run (they are skipped, or fail" >&2
echo "      when NODELOOM_REQUIRE_SERVICES=1). Install it with: apt-get install chromium" >&2
exit 0

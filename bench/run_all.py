"""``make bench``: every benchmark scenario against real ``nodeloom serve`` processes (fresh
data directories, limits raised through settings, load only on 127.0.0.1), written into
docs/benchmarks.md. Each script can also run on its own (see its docstring).

    .venv/bin/python -m bench.run_all [--only NAME,...]   (names: the keys of SCENARIOS)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from bench.common import ensure_wrk, write_section

SCENARIOS: dict[str, list[str]] = {
    "api": ["-m", "bench.bench_api"],
    "runs": ["-m", "bench.bench_runs"],
    "webhooks": ["-m", "bench.bench_webhooks", "--write"],
    "webhooks-p2": ["-m", "bench.bench_webhooks", "--write", "--processes", "2"],
    "events": ["-m", "bench.bench_events"],
    "media": ["-m", "bench.bench_media", "--write"],
    "soak": ["-m", "bench.bench_soak", "--write"],
    "scaleout": ["-m", "bench.bench_scaleout", "--write"],
    "uploads": ["-m", "bench.bench_uploads", "--write"],
    "approvals": ["-m", "bench.bench_approvals"],
    "app_page": ["-m", "bench.bench_app_page", "--write"],
    "app_visitors": ["-m", "bench.bench_app_visitors", "--write"],
    "app_build": ["-m", "bench.bench_app_build", "--write"],
}
# Scripts that print their results instead of writing their own section.
PRINTED = {
    "events": "### Real-time events: 1,000 WebSocket subscribers, runs at 50/s\n\n",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    args = parser.parse_args()
    ensure_wrk()
    failed = []
    for name in args.only.split(","):
        started = time.monotonic()
        print(f"== {name}", flush=True)
        done = subprocess.run(
            [sys.executable, *SCENARIOS[name]], capture_output=True, text=True, check=False
        )
        print(done.stdout[-4000:], flush=True)
        if name in PRINTED:
            command = ".venv/bin/python " + " ".join(SCENARIOS[name])
            body = PRINTED[name] + "```\n" + done.stdout.strip() + "\n```"
            write_section(name, command, body)
        if done.returncode != 0:
            failed.append(name)
            print(done.stderr[-4000:], file=sys.stderr)
        print(f"   ({time.monotonic() - started:.0f} s)", flush=True)
    if failed:
        raise SystemExit(f"benchmarks that failed or missed their target: {', '.join(failed)}")


if __name__ == "__main__":
    main()

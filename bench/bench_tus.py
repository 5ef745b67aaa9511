"""Resumable uploads (tus) against a real ``nodeloom serve`` (issue 33, ADR 0038): what a
large upload costs the server in memory and how fast it is received, in one PATCH and in
several, beside ``cp`` of the same size on the same disk.

    .venv/bin/python -m bench.bench_tus [--large-mb 1024] [--patches 8] [--write]

The bytes are not media (as in bench_uploads): the server stores every byte, records the
offset as it goes, and at the last byte hashes the file and refuses it (415) after reading
its first bytes, so the figure is the resumable receiving path (plus that hash). Reported:
the server's RSS before and the highest sampled while the body streams, and the throughput.
Target (issue 33): RSS grows by < 64 MB; throughput at least half of ``cp``'s.
"""

from __future__ import annotations

import argparse
import time

import httpx

from bench.bench_uploads import (
    CHUNK,
    _body,
    _cp_seconds,
    _RssSampler,
    large_upload,
    rss_and_throughput,
)
from bench.common import Server, make_account, server, table, write_section

COMMAND = ".venv/bin/python -m bench.bench_tus --write"
TUS = {"Tus-Resumable": "1.0.0"}


def _upload(http: httpx.Client, auth: dict[str, str], size: int, patches: int) -> int:
    """One tus upload of ``size`` bytes in ``patches`` PATCHes; the last answer's status."""
    created = http.post("/api/v1/uploads/tus", headers={**auth, **TUS, "Upload-Length": str(size)})
    assert created.status_code == 201, created.text
    path = httpx.URL(created.headers["location"]).path
    per = -(-size // patches)
    offset, status = 0, 0
    while offset < size:
        length = min(per, size - offset)
        answer = http.patch(
            path,
            content=_body(length),
            headers={
                **auth,
                **TUS,
                "Upload-Offset": str(offset),
                "Content-Type": "application/offset+octet-stream",
            },
        )
        status = answer.status_code
        assert status in (204, 415), answer.text
        offset += length
    return status


def measure(srv: Server, key: str, size: int, patches: int, cp: float) -> list[tuple[str, str]]:
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=srv.base_url, timeout=600) as http:
        _upload(http, auth, 1000, 1)  # warm the path (and the sandbox's first process)
        before = srv.rss_mb()
        with _RssSampler(srv) as sampler:
            started = time.monotonic()
            status = _upload(http, auth, size, patches)
            elapsed = time.monotonic() - started
    mb = size / CHUNK
    body = f"{mb:,.0f} MiB in {patches} PATCH(es) (last answer {status})"
    return [("body", body), *rss_and_throughput(before, sampler, mb, elapsed, cp)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--large-mb", type=int, default=1024)
    parser.add_argument("--patches", type=int, default=8)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    size = args.large_mb * CHUNK
    cp = _cp_seconds(size)
    with server() as srv:
        _jwt, key = make_account(srv.base_url)
        one = measure(srv, key, size, 1, cp)
        print(table(one, ("one PATCH", "")), flush=True)
        several = measure(srv, key, size, args.patches, cp)
        print(table(several, (f"{args.patches} PATCHes", "")), flush=True)
        # The same size through POST /uploads on the same server: the one-request path.
        plain = large_upload(srv, key, size)
        print(table(plain, ("POST /uploads, for comparison", "")), flush=True)
    if args.write:
        body = (
            "### Resumable uploads (tus, issue 33)\n\n"
            "A large body sent to `/api/v1/uploads/tus` on the embedded store (not media: "
            "the receiving path, offsets recorded as it goes, then the hash of the whole "
            "file and a 415), in one PATCH and in several.\n\n"
            + table(one, ("one PATCH", ""))
            + "\n\n"
            + table(several, (f"{args.patches} PATCHes", ""))
            + "\n\n"
            + table(plain, ("POST /uploads, for comparison", ""))
        )
        write_section("tus", f"{COMMAND} --large-mb {args.large_mb} --patches {args.patches}", body)


if __name__ == "__main__":
    main()

"""Where an account's balance lives, measured at the database (issue #20, ADR 0023).

    .venv/bin/python -m bench.bench_balance_row [--seconds 10] [--clients 1,5,20] [--write]

A scratch PostgreSQL database migrated by ``nodeloom serve --no-worker`` (an account, a
2-node webhook workflow and its webhook made through the API, one trigger accepted, the
server stopped),
then ``pgbench`` replaying the statements of one accepted trigger of that workflow — the
run's ``INSERT ... SELECT`` with its webhook and account checks, then one statement
inserting its 2 node runs, 2 artifacts, 2 ledger rows and 6 events and updating the
balance, inside BEGIN/COMMIT — at several concurrencies, with the balance updated:

- ``own row`` (what the code does): ``account_balances``, a row nothing else reads;
- ``account row`` (before ADR 0023): a ``credits_balance`` column added back to
  ``accounts`` for the bench, the row the foreign keys of runs, artifacts and ledger rows
  reference and the run's insert reads.

Each measurement starts from a vacuumed table. Machine CPU per transaction is the
machine's busy time during the load (/proc/stat) less pgbench's own, divided by the
transactions: the backends, the WAL writer and the rest of PostgreSQL. ``--write`` updates
the ``balance-row`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg

from bench import bench_scaleout as scaleout
from bench import peers_kit as kit
from bench.common import WEBHOOK_GRAPH, make_account, table, write_section

_OUTPUT = "'\\x412073756e736574206f766572207468652073656120333031'::bytea"
# One accepted trigger, as the acceptance transaction sends it (literals for the values
# the replica binds; ``:r`` makes each run's ids unique).
_SCRIPT = """\\set r random(1, 1000000000000000)
BEGIN;
INSERT INTO runs (id, account_id, workflow_id, webhook_id, status, trigger, use_cache,
 estimated_credits, credits_used, error, created_at, finished_at, cancel_requested, input,
 graph_json, workflow_version)
SELECT 'r' || :r, '{acc}', '{wf}', '{wh}', 'completed', 'webhook', true, 1, 1, 'null'::json,
 now()::timestamp, now()::timestamp, false, json_build_object('text', 'A sunset', 'id', 301),
 workflows.graph_json, workflows.version FROM workflows
WHERE workflows.id = '{wf}' AND workflows.account_id = '{acc}' AND workflows.deleted_at IS NULL
 AND EXISTS (SELECT * FROM webhooks WHERE webhooks.id = '{wh}'
  AND webhooks.workflow_id = workflows.id AND webhooks.active AND webhooks.deleted_at IS NULL)
 AND EXISTS (SELECT * FROM accounts WHERE accounts.id = workflows.account_id
  AND accounts.plan = '{plan}' AND accounts.disabled_at IS NULL);
WITH s0 AS (INSERT INTO node_runs (run_id, node_id, position, type, status, artifact_id,
 credits_used, cached, started_at, finished_at, error, attempts, claimed_by, queued_at)
 VALUES ('r' || :r, 'in', 0, 'TextInput', 'completed', 'a' || :r, 0, false, now()::timestamp,
  now()::timestamp, 'null'::json, 1, 'bench', now()::timestamp),
 ('r' || :r, 'tpl', 1, 'TextTemplate', 'completed', 'b' || :r, 1, false, now()::timestamp,
  now()::timestamp, 'null'::json, 1, 'bench', NULL)),
s1 AS (INSERT INTO artifacts (id, account_id, run_id, workflow_id, node_id, content_type,
 size_bytes, sha256, created_at, data, cache_key)
 VALUES ('a' || :r, '{acc}', 'r' || :r, '{wf}', 'in', 'text/plain', 25, md5('a' || :r),
  now()::timestamp, {output}, md5('ka' || :r)),
 ('b' || :r, '{acc}', 'r' || :r, '{wf}', 'tpl', 'text/plain', 25, md5('b' || :r),
  now()::timestamp, {output}, md5('kb' || :r))),
s2 AS (INSERT INTO credit_ledger (account_id, run_id, node_id, kind, amount, created_at)
 VALUES ('{acc}', 'r' || :r, '', 'hold', 1, now()::timestamp),
 ('{acc}', 'r' || :r, 'tpl', 'charge', 1, now()::timestamp)),
s3 AS (INSERT INTO run_events (run_id, seq, type, node_id, data, ts)
 VALUES ('r' || :r, 1, 'run.started', NULL, json_build_object('estimated_credits', 1),
  now()::timestamp),
 ('r' || :r, 2, 'node.started', 'in', '{{}}'::json, now()::timestamp),
 ('r' || :r, 3, 'node.completed', 'in', json_build_object('artifact_id', 'a' || :r),
  now()::timestamp),
 ('r' || :r, 4, 'node.started', 'tpl', '{{}}'::json, now()::timestamp),
 ('r' || :r, 5, 'node.completed', 'tpl', json_build_object('artifact_id', 'b' || :r),
  now()::timestamp),
 ('r' || :r, 6, 'run.completed', NULL, json_build_object('credits_used', 1), now()::timestamp))
{update};
COMMIT;
"""
_UPDATES = {
    "own row": (
        "account_balances",
        "UPDATE account_balances SET credits_balance = credits_balance - 1 + 0"
        " WHERE account_id = '{acc}' AND credits_balance >= 1",
    ),
    "account row": (
        "accounts",
        "UPDATE accounts SET credits_balance = credits_balance - 1 + 0"
        " WHERE id = '{acc}' AND credits_balance >= 1",
    ),
}


def _prepare(fleet: scaleout.Fleet) -> dict[str, str]:
    """The rows the replayed trigger needs, made through the fleet's server (which migrated
    its scratch database); their ids."""
    _jwt, key = make_account(fleet.base_url)
    scaleout._grant(fleet)
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=fleet.base_url, headers=auth, timeout=30) as http:
        graph = {"name": "balance", "graph_json": WEBHOOK_GRAPH}
        wf = http.post("/api/v1/workflows", json=graph).json()["id"]
        hook = http.post(f"/api/v1/workflows/{wf}/webhooks", json={"name": "h"}).json()
        http.post(f"/api/v1/webhooks/{hook['token']}", json={"text": "x"}).raise_for_status()
        account = http.get("/api/v1/me").json()
    return {"acc": account["id"], "plan": account["plan"], "wf": wf, "wh": hook["id"]}


def _busy_and_total() -> tuple[int, int]:
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def _pgbench(
    admin: str, database: str, script: Path, clients: int, seconds: int
) -> tuple[float, float, float, float]:
    parts = urlsplit(admin)
    busy0, total0 = _busy_and_total()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        ["pgbench", "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432),
         "-U", parts.username or "postgres", "-n", "-M", "prepared", "-f", str(script),
         "-c", str(clients), "-j", str(min(clients, 2)), "-T", str(seconds), database],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy1, total1 = _busy_and_total()
    tick = os.sysconf("SC_CLK_TCK")
    own = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    done = int(
        next(ln for ln in out.splitlines() if "actually processed" in ln).split()[-1].split("/")[0]
    )
    tps = float(next(ln for ln in out.splitlines() if ln.startswith("tps")).split()[2])
    latency = float(next(ln for ln in out.splitlines() if "latency average" in ln).split()[3])
    cpu_ms = 1000 * ((busy1 - busy0) / tick - own) / done
    busy_pct = 100 * (busy1 - busy0) / max(1, total1 - total0)
    return tps, latency, cpu_ms, busy_pct


def main(args: argparse.Namespace) -> None:
    rows = []
    with scaleout.fleet(workers=0) as fleet:
        ids = _prepare(fleet)
        # Nothing but pgbench on the database while it is measured.
        fleet.api.send_signal(signal.SIGTERM)
        fleet.api.wait(60)
        database = fleet.db_url.rsplit("/", 1)[1]
        admin = scaleout.PG_ADMIN.rsplit("/", 1)[0] + "/" + database
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                "ALTER TABLE accounts ADD COLUMN credits_balance bigint NOT NULL"
                " DEFAULT 1000000000000"
            )
        with tempfile.TemporaryDirectory() as tmp:
            scripts = {}
            for name, (_table, update) in _UPDATES.items():
                scripts[name] = Path(tmp) / f"{name.replace(' ', '_')}.sql"
                text = _SCRIPT.format(update=update.format(**ids), output=_OUTPUT, **ids)
                scripts[name].write_text(text)
            for clients in args.clients:
                for name, (table_name, _update) in _UPDATES.items():
                    with psycopg.connect(admin, autocommit=True) as conn:
                        conn.execute(f"VACUUM {table_name}")  # type: ignore[arg-type]
                    time.sleep(1)
                    kit.log(f"{name}, {clients} clients")
                    tps, latency, cpu, busy = _pgbench(
                        scaleout.PG_ADMIN, database, scripts[name], clients, args.seconds
                    )
                    rows.append((clients, name, f"{tps:,.0f}", f"{latency:.1f}", f"{cpu:.2f}",
                                 f"{busy:.0f}%"))  # fmt: skip
    body = table(
        rows,
        ("clients", "balance updated in", "transactions/s", "mean latency ms",
         "machine CPU ms per transaction (pgbench's own excluded)", "machine busy"),
    )  # fmt: skip
    print(body)
    if args.write:
        command = "python -m bench.bench_balance_row " + " ".join(
            [
                "--seconds",
                str(args.seconds),
                "--clients",
                ",".join(map(str, args.clients)),
                "--write",
            ]
        )
        write_section("balance-row", command, body)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=10, help="seconds per measurement")
    parser.add_argument(
        "--clients",
        type=lambda s: [int(c) for c in s.split(",")],
        default=[1, 5, 20],
        help="concurrencies, comma-separated",
    )
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    main(parser.parse_args())

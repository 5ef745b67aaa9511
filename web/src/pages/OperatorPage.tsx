import { useState } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { keys, useComfyUIServers } from "../api/queries";
import type { FleetServer } from "../api/types";
import { ErrorBanner, useAction } from "../components/forms";
import { totals } from "../operator/pool";
import { ServerTable } from "../operator/ServerTable";

/** For the server's operators: every ComfyUI server Nodeloom talks to — the shared pool
 * (NODELOOM_COMFYUI_POOL) and the servers the accounts' comfyui credentials name — with each
 * one's prompts in flight, queue, failures, last answer and whether it drains, as every
 * process using it reports it, and a Drain / Undrain button. Read again every 5 s. */
export function OperatorPage() {
  const client = useQueryClient();
  const query = useComfyUIServers();
  const { error, act } = useAction();
  const [pending, setPending] = useState<string | null>(null);
  const servers = query.data?.servers ?? [];
  const pool = servers.filter((s) => s.fleet === "pool");
  const accounts = servers.filter((s) => s.fleet === "account");
  const sum = totals(pool);

  const drain = (server: FleetServer, draining: boolean) =>
    void act(async () => {
      setPending(server.id);
      try {
        unwrap(
          await api.POST("/api/v1/operator/comfyui-servers/{server_id}/{action}", {
            params: { path: { server_id: server.id, action: draining ? "drain" : "undrain" } },
          }),
        );
        await client.invalidateQueries({ queryKey: keys.comfyuiServers });
      } finally {
        setPending(null);
      }
    });

  return (
    <main className="page">
      <h1>ComfyUI servers</h1>
      <p className="small muted">
        Every ComfyUI server this Nodeloom sends prompts to. Drain one for maintenance: the prompts
        it holds finish, it gets no new one — from every API replica and worker within a health
        check (5 s), and it stays drained across restarts until undrained.
      </p>
      <ErrorBanner error={error ?? (query.error ? query.error.message : null)} />
      {query.isLoading && <p className="muted">Loading…</p>}

      <h2>Shared pool</h2>
      {query.data && pool.length === 0 && (
        <p className="muted">
          This server has no shared pool (<code>NODELOOM_COMFYUI_POOL</code>).
        </p>
      )}
      {pool.length > 0 && (
        <>
          <p className="small">
            {sum.answering} of {sum.servers} servers answering · {sum.inFlight} prompts in flight on{" "}
            {sum.slots} slots · at most {query.data?.account_limit} per account
          </p>
          <ServerTable servers={pool} label="Shared pool" onDrain={drain} pending={pending} />
        </>
      )}

      <h2>Accounts’ servers</h2>
      <p className="small muted">
        The servers the accounts’ comfyui credentials name, by host and account.
      </p>
      {query.data && accounts.length === 0 && (
        <p className="muted">No account names servers of its own.</p>
      )}
      {accounts.length > 0 && (
        <ServerTable
          servers={accounts}
          label="Accounts’ servers"
          onDrain={drain}
          pending={pending}
          showAccount
        />
      )}
    </main>
  );
}

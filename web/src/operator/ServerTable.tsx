import type { FleetServer } from "../api/types";
import { ago, serverState } from "./pool";

/** ComfyUI servers with their state and a Drain / Undrain button each: the operator page's
 * (the pool's and the accounts') and an account's own credential's. `onDrain(server, true)`
 * drains, `false` undrains; `pending` is the id of the server whose click is on its way. A
 * server its configuration drains cannot be undrained here (the button says where). */
export function ServerTable({
  servers,
  label,
  onDrain,
  pending = null,
  showAccount = false,
  now = Date.now(),
}: {
  servers: FleetServer[];
  label: string;
  onDrain: (server: FleetServer, drain: boolean) => void;
  pending?: string | null;
  showAccount?: boolean;
  now?: number;
}) {
  return (
    <table className="pool" aria-label={label}>
      <thead>
        <tr>
          <th>Server</th>
          {showAccount && <th>Account</th>}
          <th>State</th>
          <th>In flight</th>
          <th>Queue</th>
          <th>Failures</th>
          <th>Last seen</th>
          <th>
            <span className="sr-only">Actions</span>
          </th>
        </tr>
      </thead>
      <tbody>
        {servers.map((server) => (
          <tr key={server.id} data-state={serverState(server)} data-server-id={server.id}>
            <td>
              {server.name} <span className="muted small">{server.base_url ?? server.host}</span>
            </td>
            {showAccount && <td>{server.account_email ?? "shared pool"}</td>}
            <td>{serverState(server)}</td>
            <td>
              {server.in_flight} / {server.max_in_flight}
            </td>
            <td>{server.queue}</td>
            <td>{server.failures}</td>
            <td>{ago(server.last_seen, now)}</td>
            <td className="actions">
              <DrainButton server={server} onDrain={onDrain} busy={pending === server.id} />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function DrainButton({
  server,
  onDrain,
  busy,
}: {
  server: FleetServer;
  onDrain: (server: FleetServer, drain: boolean) => void;
  busy: boolean;
}) {
  if (server.drain_configured) {
    return (
      <button
        type="button"
        disabled
        title="Drained by its configuration: change it there to undrain"
        aria-label={`Undrain ${server.name} (set in its configuration)`}
      >
        Undrain
      </button>
    );
  }
  const drain = !server.draining;
  return (
    <button
      type="button"
      disabled={busy}
      onClick={() => onDrain(server, drain)}
      aria-label={`${drain ? "Drain" : "Undrain"} ${server.name}`}
      title={
        drain
          ? "Its prompts finish; it gets no new one until undrained"
          : "It takes new prompts again"
      }
    >
      {busy ? "…" : drain ? "Drain" : "Undrain"}
    </button>
  );
}

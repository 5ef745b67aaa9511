// The operator page's reading of ComfyUI servers (GET /api/v1/operator/comfyui-servers, and an
// account's own through /credentials/{id}/servers): one line of state per server, and the
// totals. Kept apart from the page so it is tested.
import type { FleetServer } from "../api/types";

/** What the state and the totals read of a server (the pool's or an account's). */
export type Figures = Pick<FleetServer, "draining" | "answering" | "in_flight" | "max_in_flight">;

export type ServerState = "answering" | "not answering" | "draining" | "unused";

/** What the operator needs first: a draining server says so (whatever it answers); otherwise whether it answered its last check, or "unused" while no process has
 * sent it a prompt since starting. */
export function serverState(server: Figures): ServerState {
  if (server.draining) return "draining";
  if (server.answering === null || server.answering === undefined) return "unused";
  return server.answering ? "answering" : "not answering";
}

/** "3 s ago", "4 min ago", "2 h ago", or "never", from `lastSeen` (ISO) at `now` (ms). */
export function ago(lastSeen: string | null | undefined, now: number): string {
  if (!lastSeen) return "never";
  const seconds = Math.max(0, Math.round((now - Date.parse(lastSeen)) / 1000));
  if (seconds < 90) return `${seconds} s ago`;
  if (seconds < 90 * 60) return `${Math.round(seconds / 60)} min ago`;
  return `${Math.round(seconds / 3600)} h ago`;
}

export interface PoolTotals {
  servers: number;
  answering: number;
  inFlight: number;
  slots: number; // prompts the servers that take new ones may run at once (per process)
}

/** The pool at a glance: servers answering, prompts in flight over the slots of the servers
 * that take new prompts (answering or not yet checked, not draining). */
export function totals(servers: Figures[]): PoolTotals {
  const taking = servers.filter((s) => !s.draining && s.answering !== false);
  return {
    servers: servers.length,
    answering: servers.filter((s) => s.answering === true).length,
    inFlight: servers.reduce((sum, s) => sum + s.in_flight, 0),
    slots: taking.reduce((sum, s) => sum + s.max_in_flight, 0),
  };
}

import { describe, expect, it } from "vitest";
import type { PoolServer } from "../api/types";
import { ago, serverState, totals } from "./pool";

function server(extra: Partial<PoolServer> = {}): PoolServer {
  return {
    id: "a1",
    name: "gpu0",
    base_url: "http://10.0.0.5:8188",
    max_in_flight: 1,
    draining: false,
    drain_configured: false,
    answering: true,
    in_flight: 0,
    queue: 0,
    failures: 0,
    last_seen: null,
    processes: 1,
    ...extra,
  };
}

describe("serverState", () => {
  it("says draining first, whatever the server answers", () => {
    expect(serverState(server({ draining: true, answering: false }))).toBe("draining");
  });
  it("tells answering from not answering, and unused while no process checked it", () => {
    expect(serverState(server())).toBe("answering");
    expect(serverState(server({ answering: false }))).toBe("not answering");
    expect(serverState(server({ answering: null, processes: 0 }))).toBe("unused");
  });
});

describe("ago", () => {
  const now = Date.parse("2026-11-29T03:00:00Z");
  it("counts seconds, then minutes, then hours", () => {
    expect(ago("2026-11-29T02:59:57Z", now)).toBe("3 s ago");
    expect(ago("2026-11-29T02:56:00Z", now)).toBe("4 min ago");
    expect(ago("2026-11-29T01:00:00Z", now)).toBe("2 h ago");
  });
  it("says never for a server never seen, and no time to come for a clock ahead", () => {
    expect(ago(null, now)).toBe("never");
    expect(ago("2026-11-29T03:00:05Z", now)).toBe("0 s ago");
  });
});

describe("totals", () => {
  it("counts slots only of servers that take new prompts", () => {
    const servers = [
      server({ in_flight: 1 }),
      server({ name: "gpu1", max_in_flight: 2, answering: null, processes: 0 }),
      server({ name: "gpu2", draining: true, in_flight: 1 }),
      server({ name: "gpu3", answering: false }),
    ];
    expect(totals(servers)).toEqual({ servers: 4, answering: 2, inFlight: 2, slots: 3 });
  });
});

// @vitest-environment jsdom
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { render, screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import type { FleetServer } from "../api/types";

// The API as the page sees it over fetch: the servers, and drain/undrain changing them. Set up
// before the app's client is imported (it keeps the fetch it finds then).
const server = vi.hoisted(() => {
  const state = { servers: [] as Record<string, unknown>[], posts: [] as string[] };
  const answer = (body: unknown, status = 200) =>
    new Response(JSON.stringify(body), {
      status,
      headers: { "content-type": "application/json" },
    });
  class RelativeRequest extends Request {
    constructor(input: RequestInfo | URL, init?: RequestInit) {
      super(typeof input === "string" ? new URL(input, "http://nodeloom.test") : input, init);
    }
  }
  vi.stubGlobal("Request", RelativeRequest);
  vi.stubGlobal("fetch", async (request: Request) => {
    const path = new URL(request.url).pathname;
    if (request.method === "GET" && path === "/api/v1/operator/comfyui-servers") {
      return answer({ account_limit: 2, servers: state.servers });
    }
    const drain = /^\/api\/v1\/operator\/comfyui-servers\/([^/]+)\/(drain|undrain)$/.exec(path);
    if (request.method === "POST" && drain) {
      state.posts.push(path);
      const row = state.servers.find((s) => s.id === drain[1]);
      if (!row) return answer({ status: 404, code: "not_found", detail: "No such server." }, 404);
      row.draining = drain[2] === "drain";
      return answer(row);
    }
    return answer({ status: 404, code: "not_found", detail: path }, 404);
  });
  return state;
});

import { OperatorPage } from "./OperatorPage";

function row(extra: Partial<FleetServer>): FleetServer {
  return {
    id: "pool-1",
    fleet: "pool",
    name: "gpu0",
    host: "10.0.0.5:8188",
    base_url: "http://10.0.0.5:8188",
    account_email: null,
    max_in_flight: 1,
    draining: false,
    drain_configured: false,
    answering: true,
    in_flight: 1,
    queue: 2,
    failures: 0,
    last_seen: new Date().toISOString(),
    processes: 1,
    ...extra,
  };
}

function page() {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  render(
    <QueryClientProvider client={client}>
      <OperatorPage />
    </QueryClientProvider>,
  );
  return userEvent.setup();
}

describe("OperatorPage", () => {
  it("lists the pool's servers and the accounts' by host and e-mail", async () => {
    server.servers = [
      row({}),
      row({
        id: "old-1",
        name: "old",
        base_url: "http://10.0.0.6:8188",
        draining: true,
        drain_configured: true,
        answering: false,
        in_flight: 0,
      }),
      row({
        id: "acct-1",
        fleet: "account",
        name: "home",
        host: "192.168.1.7:8188",
        base_url: null,
        account_email: "ada@example.com",
        answering: false,
        in_flight: 0,
      }),
    ];
    page();
    const pool = await screen.findByRole("table", { name: "Shared pool" });
    expect(within(pool).getByText("http://10.0.0.5:8188")).toBeTruthy();
    expect(within(pool).getAllByRole("row")).toHaveLength(3); // the head and two servers
    const theirs = screen.getByRole("table", { name: "Accounts’ servers" });
    expect(within(theirs).getByText("192.168.1.7:8188")).toBeTruthy();
    expect(within(theirs).getByText("ada@example.com")).toBeTruthy();
    expect(within(theirs).getByText("not answering")).toBeTruthy();
    // Drained by its configuration: no button undrains it.
    const configured = screen.getByRole("button", {
      name: "Undrain old (set in its configuration)",
    });
    expect(configured).toHaveProperty("disabled", true);
    expect(
      screen.getByText(/1 of 2 servers answering · 1 prompts in flight on 1 slots/),
    ).toBeTruthy();
  });

  it("drains and undrains a server through the API, then shows it as it is", async () => {
    server.servers = [
      row({}),
      row({ id: "acct-1", fleet: "account", name: "home", account_email: "a@b.c" }),
    ];
    server.posts = [];
    const user = page();
    await user.click(await screen.findByRole("button", { name: "Drain home" }));
    const undrain = await screen.findByRole("button", { name: "Undrain home" });
    expect(server.posts).toEqual(["/api/v1/operator/comfyui-servers/acct-1/drain"]);
    const theirs = screen.getByRole("table", { name: "Accounts’ servers" });
    expect(within(theirs).getByText("draining")).toBeTruthy();
    await user.click(undrain);
    await screen.findByRole("button", { name: "Drain home" });
    expect(server.posts.at(-1)).toBe("/api/v1/operator/comfyui-servers/acct-1/undrain");
    expect(screen.getByRole("button", { name: "Drain gpu0" })).toBeTruthy();
  });
});

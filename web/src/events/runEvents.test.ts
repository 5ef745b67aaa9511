import { describe, expect, it } from "vitest";
import type { Run } from "../api/types";
import {
  EMPTY_RUN,
  fromRunRecord,
  isTerminal,
  reduceRun,
  shownRunStatus,
  startedRun,
  type RunEvent,
} from "./runEvents";

let seq = 0;
function ev(type: string, data: Record<string, unknown> = {}, node_id?: string): RunEvent {
  seq += 1;
  return {
    type,
    seq,
    ts: "2026-11-25T10:00:00.000Z",
    run_id: "r1",
    workflow_id: "w1",
    ...(node_id ? { node_id } : {}),
    data,
  };
}
const fold = (events: RunEvent[], from = EMPTY_RUN) => events.reduce(reduceRun, from);

describe("reduceRun", () => {
  it("follows a node from queued to completed with its output and credits", () => {
    seq = 0;
    const state = fold(
      [
        ev("run.started", { estimated_credits: 3 }),
        ev("node.started", {}, "a"),
        ev("node.progress", { progress: 0.5 }, "a"),
      ],
      startedRun("r1", ["a", "b"]),
    );
    expect(state.run?.status).toBe("running");
    expect(state.nodes.a).toEqual({ status: "running", progress: 0.5, error: null });
    expect(state.nodes.b).toEqual({ status: "queued" });
    const done = fold(
      [
        ev("node.completed", { artifact_id: "art", credits_used: 2, cached: false }, "a"),
        ev("node.completed", { artifact_id: "art2", credits_used: 0, cached: true }, "b"),
        ev("run.completed", { credits_used: 2, duration_ms: 1500 }),
      ],
      state,
    );
    expect(done.nodes.a).toEqual({
      status: "completed",
      artifactId: "art",
      cached: false,
      creditsUsed: 2,
    });
    expect(done.nodes.b?.cached).toBe(true);
    expect(done.nodes.b?.creditsUsed).toBe(0);
    expect(done.run).toMatchObject({ status: "completed", creditsUsed: 2, durationMs: 1500 });
  });

  it("paints a failure, the skipped child and the run's error", () => {
    seq = 0;
    const state = fold([
      ev("run.started"),
      ev("node.started", {}, "fetch"),
      ev("node.failed", { error: { code: "node_failed", message: "refused" } }, "fetch"),
      ev(
        "node.skipped",
        { reason: { code: "upstream_failed", message: "upstream node fetch failed" } },
        "wait",
      ),
      ev("run.failed", {
        credits_used: 0,
        duration_ms: 10,
        error: { code: "node_failed", message: "fetch failed", node_id: "fetch" },
      }),
    ]);
    expect(state.nodes.fetch).toEqual({ status: "failed", error: "refused" });
    expect(state.nodes.wait).toEqual({
      status: "skipped",
      error: "Skipped: upstream node fetch failed.",
    });
    expect(state.run).toMatchObject({ runId: "r1", status: "failed", error: "fetch failed" });
  });

  it("reads run.cancelled, and a run.failed with code cancelled, as cancelled", () => {
    const cancelledError = { code: "cancelled", message: "cancelled by the user", node_id: null };
    seq = 0;
    const modern = fold([
      ev("run.started"),
      ev("node.started", {}, "wait"),
      ev("node.cancelled", {}, "wait"),
      ev("run.cancelled", { error: cancelledError, credits_used: 0, duration_ms: 900 }),
    ]);
    seq = 0;
    const older = fold([
      ev("run.started"),
      ev("node.cancelled", {}, "wait"),
      ev("run.failed", { error: cancelledError, credits_used: 0, duration_ms: 900 }),
    ]);
    for (const state of [modern, older]) {
      expect(state.nodes.wait).toEqual({ status: "cancelled" });
      expect(state.run).toMatchObject({ status: "cancelled", durationMs: 900 });
    }
  });

  it("ignores repeated and older events and never mutates its input", () => {
    seq = 0;
    const started = ev("node.started", {}, "a");
    const completed = ev("node.completed", { artifact_id: "x", cached: false }, "a");
    const state = fold([started, completed]);
    const frozen = JSON.stringify(state);
    expect(reduceRun(state, started)).toBe(state);
    expect(reduceRun(state, completed)).toBe(state);
    reduceRun(state, ev("node.failed", { error: { message: "late" } }, "a"));
    expect(JSON.stringify(state)).toBe(frozen);
  });

  it("knows every terminal event", () => {
    expect(["run.completed", "run.failed", "run.cancelled"].every(isTerminal)).toBe(true);
    expect(["run.started", "node.completed", "node.cancelled"].some(isTerminal)).toBe(false);
  });
});

describe("fromRunRecord", () => {
  const record = {
    id: "r9",
    status: "failed",
    error: { code: "cancelled", message: "cancelled", node_id: null },
    credits_used: 1,
    duration_ms: 20,
    input: { text: "hi" },
    node_runs: [
      { node_id: "a", status: "completed", cached: true, credits_used: 0, artifact_id: "x" },
      { node_id: "b", status: "pending", cached: false, credits_used: 0, artifact_id: null },
    ],
  } as unknown as Run;

  it("takes the run, its input and every node's state from the record", () => {
    const state = fromRunRecord(record);
    expect(state.run).toMatchObject({ runId: "r9", status: "cancelled", input: { text: "hi" } });
    expect(state.nodes.a).toMatchObject({ status: "completed", cached: true, creditsUsed: 0 });
    expect(state.nodes.b?.status).toBe("queued");
  });

  it("leaves other statuses as they are", () => {
    expect(shownRunStatus({ status: "failed", error: { code: "node_failed" } })).toBe("failed");
    expect(shownRunStatus({ status: "completed" })).toBe("completed");
    expect(shownRunStatus({ status: "cancelled" })).toBe("cancelled");
  });
});

describe("batches", () => {
  it("counts a node's items done from item events (17/40) and keeps each item's output", () => {
    seq = 0;
    const events = [
      ev(
        "node.completed",
        { artifact_id: "list", credits_used: 0, cached: false, items: 3 },
        "each",
      ),
      ev("node.started", { item_index: 0, item_count: 3 }, "tts"),
      ev(
        "node.completed",
        { item_index: 0, item_count: 3, artifact_id: "a0", credits_used: 2 },
        "tts",
      ),
      ev("node.started", { item_index: 1, item_count: 3 }, "tts"),
      ev("node.failed", { item_index: 1, item_count: 3, error: { message: "boom" } }, "tts"),
    ];
    const state = fold(events, startedRun("r1", ["each", "tts"]));
    expect(state.nodes.each).toMatchObject({ status: "completed", fanOut: 3 });
    const tts = state.nodes.tts;
    expect(tts?.status).toBe("running");
    expect(tts?.items).toMatchObject({ total: 3, done: 2, failed: 1 });
    expect(tts?.items?.byIndex[0]).toMatchObject({ status: "completed", artifactId: "a0" });
    expect(tts?.items?.byIndex[1]).toMatchObject({ status: "failed", error: "boom" });
    expect(tts?.creditsUsed).toBe(2);
    const done = fold(
      [ev("node.completed", { item_index: 2, item_count: 3, artifact_id: "a2" }, "tts")],
      state,
    );
    expect(done.nodes.tts).toMatchObject({ status: "failed", items: { done: 3, total: 3 } });
  });

  it("takes item entries of a run record as the node's items", () => {
    const record = {
      id: "r2",
      status: "running",
      error: null,
      credits_used: 0,
      duration_ms: 5,
      input: null,
      node_runs: [
        {
          node_id: "each",
          item_index: null,
          type: "ForEach",
          status: "completed",
          cached: false,
          credits_used: 0,
          artifact_id: "l",
        },
        {
          node_id: "each",
          item_index: 0,
          type: "ForEachItem",
          status: "completed",
          cached: false,
          credits_used: 0,
          artifact_id: "i0",
        },
        {
          node_id: "each",
          item_index: 1,
          type: "ForEachItem",
          status: "completed",
          cached: false,
          credits_used: 0,
          artifact_id: "i1",
        },
        {
          node_id: "up",
          item_index: 0,
          type: "TextTransform",
          status: "completed",
          cached: false,
          credits_used: 0,
          artifact_id: "u0",
        },
        {
          node_id: "up",
          item_index: 1,
          type: "TextTransform",
          status: "pending",
          cached: false,
          credits_used: 0,
          artifact_id: null,
        },
      ],
    } as unknown as Run;
    const state = fromRunRecord(record);
    expect(state.nodes.each).toMatchObject({ status: "completed", fanOut: 2, artifactId: "l" });
    expect(state.nodes.up).toMatchObject({ status: "running", items: { done: 1, total: 2 } });
  });
});
